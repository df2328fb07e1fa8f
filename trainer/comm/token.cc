#include "trainer/comm/token.h"

#include "absl/status/status.h"
#include "trainer/comm/ring.h"

namespace lockstep::trainer::comm {

void AttachToken(grpc::ClientContext* context, const std::string& token) {
  context->AddMetadata(kTokenMetadata, token);
}

grpc::Status CheckToken(const grpc::ServerContext* context, const std::string& token) {
  const auto& md = context->client_metadata();
  auto it = md.find(kTokenMetadata);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the call carries no job token");
  }
  if (!TokensEqual(std::string(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong job token");
  }
  return grpc::Status::OK;
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = what + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::PermissionDeniedError(msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(msg);
    case grpc::StatusCode::INVALID_ARGUMENT:
      return absl::InvalidArgumentError(msg);
    case grpc::StatusCode::FAILED_PRECONDITION:
      return absl::FailedPreconditionError(msg);
    case grpc::StatusCode::NOT_FOUND:
      return absl::NotFoundError(msg);
    case grpc::StatusCode::ABORTED:
      return absl::AbortedError(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE;
  switch (s.code()) {
    case absl::StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case absl::StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case absl::StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    default:
      break;
  }
  return grpc::Status(code, std::string(s.message()));
}

std::chrono::system_clock::time_point GrpcDeadline(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(d);
}

}  // namespace lockstep::trainer::comm
