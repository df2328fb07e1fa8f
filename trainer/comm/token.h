#pragma once
// The job token on gRPC calls, and the status and deadline conversions the services share: clients
// attach it as "x-lockstep-token" metadata, servers refuse calls without it (UNAUTHENTICATED,
// without echoing what was sent). Thread-safety: pure functions.

#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep::trainer::comm {

inline constexpr char kTokenMetadata[] = "x-lockstep-token";

void AttachToken(grpc::ClientContext* context, const std::string& token);
grpc::Status CheckToken(const grpc::ServerContext* context, const std::string& token);

// gRPC status -> absl status, with `what` in front of the message; and back.
absl::Status FromGrpc(const grpc::Status& s, const std::string& what);
grpc::Status ToGrpc(const absl::Status& s);

// A call deadline `d` from now.
std::chrono::system_clock::time_point GrpcDeadline(absl::Duration d);

}  // namespace lockstep::trainer::comm
