#include "operator/kube/api_error.h"

#include <charconv>

#include "absl/strings/cord.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"

namespace lockstep::kube {
namespace {

constexpr char kPayloadKey[] = "type.lockstep.io/kube.ApiError";

struct ReasonName {
  ApiReason reason;
  const char* text;
};
constexpr ReasonName kReasonNames[] = {
    {ApiReason::kBadRequest, "BadRequest"},
    {ApiReason::kUnauthorized, "Unauthorized"},
    {ApiReason::kForbidden, "Forbidden"},
    {ApiReason::kNotFound, "NotFound"},
    {ApiReason::kAlreadyExists, "AlreadyExists"},
    {ApiReason::kConflict, "Conflict"},
    {ApiReason::kGone, "Gone"},
    {ApiReason::kGone, "Expired"},
    {ApiReason::kInvalid, "Invalid"},
    {ApiReason::kMethodNotAllowed, "MethodNotAllowed"},
    {ApiReason::kTooManyRequests, "TooManyRequests"},
    {ApiReason::kInternalError, "InternalError"},
    {ApiReason::kServiceUnavailable, "ServiceUnavailable"},
    {ApiReason::kTimeout, "Timeout"},
    {ApiReason::kTimeout, "ServerTimeout"},
};

ApiReason ReasonFromText(std::string_view text) {
  for (const ReasonName& r : kReasonNames) {
    if (text == r.text) return r.reason;
  }
  return ApiReason::kUnknown;
}

ApiReason ReasonFromCode(int code) {
  switch (code) {
    case 400:
      return ApiReason::kBadRequest;
    case 401:
      return ApiReason::kUnauthorized;
    case 403:
      return ApiReason::kForbidden;
    case 404:
      return ApiReason::kNotFound;
    case 405:
      return ApiReason::kMethodNotAllowed;
    case 409:
      return ApiReason::kConflict;
    case 410:
      return ApiReason::kGone;
    case 422:
      return ApiReason::kInvalid;
    case 429:
      return ApiReason::kTooManyRequests;
    case 500:
      return ApiReason::kInternalError;
    case 503:
      return ApiReason::kServiceUnavailable;
    case 504:
      return ApiReason::kTimeout;
    default:
      return ApiReason::kUnknown;
  }
}

absl::StatusCode CodeFor(const ApiError& e) {
  switch (e.reason) {
    case ApiReason::kNotFound:
      return absl::StatusCode::kNotFound;
    case ApiReason::kAlreadyExists:
      return absl::StatusCode::kAlreadyExists;
    case ApiReason::kConflict:
      return absl::StatusCode::kAborted;
    case ApiReason::kGone:
      return absl::StatusCode::kOutOfRange;
    case ApiReason::kBadRequest:
    case ApiReason::kInvalid:
      return absl::StatusCode::kInvalidArgument;
    case ApiReason::kUnauthorized:
      return absl::StatusCode::kUnauthenticated;
    case ApiReason::kForbidden:
      return absl::StatusCode::kPermissionDenied;
    case ApiReason::kMethodNotAllowed:
      return absl::StatusCode::kUnimplemented;
    case ApiReason::kTooManyRequests:
      return absl::StatusCode::kResourceExhausted;
    case ApiReason::kInternalError:
      return absl::StatusCode::kInternal;
    case ApiReason::kTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case ApiReason::kServiceUnavailable:
      return absl::StatusCode::kUnavailable;
    case ApiReason::kUnknown:
      break;
  }
  if (e.code == 413 || e.code == 415) return absl::StatusCode::kInvalidArgument;
  if (e.code >= 400 && e.code < 500) return absl::StatusCode::kFailedPrecondition;
  return absl::StatusCode::kUnavailable;
}

std::optional<int64_t> ParseSeconds(std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

// Fills `e` from a metav1.Status object; tolerant of missing or mistyped fields.
void ReadStatusObject(const nlohmann::json& j, ApiError* e) {
  if (!j.is_object()) return;
  if (auto it = j.find("code"); it != j.end() && it->is_number_integer() && e->code == 0) {
    e->code = it->get<int>();
  }
  e->reason_text = api::StringAt(j, "reason");
  e->message = api::StringAt(j, "message");
  auto details = j.find("details");
  if (details == j.end() || !details->is_object()) return;
  e->kind = api::StringAt(*details, "kind");
  e->name = api::StringAt(*details, "name");
  if (auto it = details->find("retryAfterSeconds"); it != details->end() && it->is_number()) {
    e->retry_after_seconds = it->get<int64_t>();
  }
  if (auto causes = details->find("causes"); causes != details->end() && causes->is_array()) {
    for (const nlohmann::json& c : *causes) {
      if (!c.is_object()) continue;
      e->causes.push_back(
          {api::StringAt(c, "reason"), api::StringAt(c, "message"), api::StringAt(c, "field")});
    }
  }
}

std::string Printable(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 200)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (body.size() > 200) out += "...";
  return out;
}

absl::Status Make(ApiError e, std::string_view what) {
  ApiReason by_text = ReasonFromText(e.reason_text);
  e.reason = by_text != ApiReason::kUnknown ? by_text : ReasonFromCode(e.code);
  std::string message = StrCat(what, ": ", e.message.empty() ? "no message" : e.message);
  for (const StatusCause& c : e.causes) {
    if (!c.message.empty() && e.message.find(c.message) == std::string::npos) {
      message += StrCat("; ", c.field.empty() ? "" : c.field + ": ", c.message);
    }
  }
  message += StrCat(" (HTTP ", e.code, e.reason_text.empty() ? "" : " " + e.reason_text, ")");
  absl::Status status(CodeFor(e), message);
  nlohmann::json payload = {{"code", e.code},        {"reason", static_cast<int>(e.reason)},
                            {"text", e.reason_text}, {"message", e.message},
                            {"kind", e.kind},        {"name", e.name}};
  for (const StatusCause& c : e.causes) {
    payload["causes"].push_back({c.reason, c.message, c.field});
  }
  if (e.retry_after_seconds) payload["retryAfter"] = *e.retry_after_seconds;
  status.SetPayload(kPayloadKey, absl::Cord(payload.dump()));
  return status;
}

}  // namespace

absl::Status ErrorFromResponse(int http_status, std::string_view body,
                               const std::string* retry_after_header, std::string_view what) {
  ApiError e;
  e.code = http_status;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && api::StringAt(j, "kind") == "Status") {
    ReadStatusObject(j, &e);
    e.code = http_status;  // the HTTP status wins over the body's claim
  } else if (!body.empty()) {
    e.message = Printable(body);
  }
  if (retry_after_header) {
    if (std::optional<int64_t> s = ParseSeconds(*retry_after_header)) e.retry_after_seconds = s;
  }
  return Make(std::move(e), what);
}

absl::Status ErrorFromStatusObject(const nlohmann::json& status, std::string_view what) {
  ApiError e;
  ReadStatusObject(status, &e);
  if (e.code == 0) e.code = 500;
  return Make(std::move(e), what);
}

std::optional<ApiError> GetApiError(const absl::Status& s) {
  auto payload = s.GetPayload(kPayloadKey);
  if (!payload) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(std::string(*payload), nullptr, false);
  if (!j.is_object()) return std::nullopt;
  ApiError e;
  e.code = j.value("code", 0);
  e.reason = static_cast<ApiReason>(j.value("reason", 0));
  e.reason_text = j.value("text", "");
  e.message = j.value("message", "");
  e.kind = j.value("kind", "");
  e.name = j.value("name", "");
  if (j.contains("causes")) {
    for (const auto& c : j["causes"]) e.causes.push_back({c[0], c[1], c[2]});
  }
  if (j.contains("retryAfter")) e.retry_after_seconds = j["retryAfter"].get<int64_t>();
  return e;
}

namespace {
bool HasReason(const absl::Status& s, ApiReason r) {
  std::optional<ApiError> e = GetApiError(s);
  return e && e->reason == r;
}
}  // namespace

bool IsApiNotFound(const absl::Status& s) { return HasReason(s, ApiReason::kNotFound); }
bool IsApiAlreadyExists(const absl::Status& s) { return HasReason(s, ApiReason::kAlreadyExists); }
bool IsApiConflict(const absl::Status& s) { return HasReason(s, ApiReason::kConflict); }
bool IsApiGone(const absl::Status& s) { return HasReason(s, ApiReason::kGone); }
bool IsApiInvalid(const absl::Status& s) {
  return HasReason(s, ApiReason::kInvalid) || HasReason(s, ApiReason::kBadRequest);
}
bool IsApiThrottled(const absl::Status& s) { return HasReason(s, ApiReason::kTooManyRequests); }

std::optional<absl::Duration> RetryAfter(const absl::Status& s) {
  std::optional<ApiError> e = GetApiError(s);
  if (!e || !e->retry_after_seconds) return std::nullopt;
  return absl::Seconds(*e->retry_after_seconds);
}

}  // namespace lockstep::kube
