#pragma once
// The job token on gRPC calls: clients attach it as "x-lockstep-token" metadata, servers refuse
// calls without it (UNAUTHENTICATED, without echoing what was sent).
// Thread-safety: pure functions.

#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace lockstep::trainer::comm {

inline constexpr char kTokenMetadata[] = "x-lockstep-token";

void AttachToken(grpc::ClientContext* context, const std::string& token);
grpc::Status CheckToken(const grpc::ServerContext* context, const std::string& token);

// gRPC status -> absl status, with `what` in front of the message.
absl::Status FromGrpc(const grpc::Status& s, const std::string& what);

}  // namespace lockstep::trainer::comm
