#pragma once
// Errors from the Kubernetes API as absl::Status. An HTTP error response (and a watch ERROR
// event) carries a metav1.Status body; it becomes a Status whose code carries the retry policy
// and whose payload keeps the typed ApiError, so callers ask IsApiNotFound(s), IsApiConflict(s),
// ...
//
// Codes: 404 kNotFound; 409 AlreadyExists kAlreadyExists; 409 Conflict kAborted (re-read and
// retry); 410 Gone/Expired kOutOfRange (the resourceVersion left the server's window: relist);
// 400/413/415/422 kInvalidArgument (terminal); 401 kUnauthenticated; 403 kPermissionDenied;
// 405 kUnimplemented; 429 kResourceExhausted (retry after RetryAfter()); 500 kInternal; 504
// kDeadlineExceeded; other 5xx kUnavailable.
// Thread-safety: plain functions.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep::kube {

enum class ApiReason {
  kUnknown,
  kBadRequest,
  kUnauthorized,
  kForbidden,
  kNotFound,
  kAlreadyExists,
  kConflict,
  kGone,
  kInvalid,
  kMethodNotAllowed,
  kTooManyRequests,
  kInternalError,
  kServiceUnavailable,
  kTimeout,
};

struct StatusCause {
  std::string reason;  // "FieldValueInvalid"
  std::string message;
  std::string field;  // "spec.replicas"
};

struct ApiError {
  int code = 0;  // HTTP status
  ApiReason reason = ApiReason::kUnknown;
  std::string reason_text;  // as the server sent it: "Expired", "NotFound", ...
  std::string message;
  std::string kind;  // details.kind / details.name, when given
  std::string name;
  std::vector<StatusCause> causes;
  std::optional<int64_t> retry_after_seconds;
};

// The error for an HTTP response with status >= 300. `body` may be anything, including
// garbage; `what` names the request ("GET /api/v1/pods") for the message.
absl::Status ErrorFromResponse(int http_status, std::string_view body,
                               const std::string* retry_after_header, std::string_view what);
// The error for a metav1.Status object (a watch ERROR event's object).
absl::Status ErrorFromStatusObject(const nlohmann::json& status, std::string_view what);

// The typed error carried by a status made above; nullopt for any other status.
std::optional<ApiError> GetApiError(const absl::Status& s);

bool IsApiNotFound(const absl::Status& s);
bool IsApiAlreadyExists(const absl::Status& s);
bool IsApiConflict(const absl::Status& s);
bool IsApiGone(const absl::Status& s);
bool IsApiInvalid(const absl::Status& s);
bool IsApiThrottled(const absl::Status& s);
// How long the server asked us to wait (429 and 503 Retry-After), if it did.
std::optional<absl::Duration> RetryAfter(const absl::Status& s);

}  // namespace lockstep::kube
