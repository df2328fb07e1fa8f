#include "operator/kube/api_error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep::kube {
namespace {

using ::testing::HasSubstr;

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                        {"code", code},     {"reason", reason},   {"message", message}}
      .dump();
}

struct ApiErrorCase {
  int http;
  std::string reason;
  absl::StatusCode code;
  ApiReason api_reason;
};

TEST(ApiErrorTest, MapsEveryReasonToACodeThatCarriesTheRetryPolicy) {
  const ApiErrorCase cases[] = {
      {404, "NotFound", absl::StatusCode::kNotFound, ApiReason::kNotFound},
      {409, "AlreadyExists", absl::StatusCode::kAlreadyExists, ApiReason::kAlreadyExists},
      {409, "Conflict", absl::StatusCode::kAborted, ApiReason::kConflict},
      {410, "Gone", absl::StatusCode::kOutOfRange, ApiReason::kGone},
      {410, "Expired", absl::StatusCode::kOutOfRange, ApiReason::kGone},
      {422, "Invalid", absl::StatusCode::kInvalidArgument, ApiReason::kInvalid},
      {400, "BadRequest", absl::StatusCode::kInvalidArgument, ApiReason::kBadRequest},
      {401, "Unauthorized", absl::StatusCode::kUnauthenticated, ApiReason::kUnauthorized},
      {403, "Forbidden", absl::StatusCode::kPermissionDenied, ApiReason::kForbidden},
      {405, "MethodNotAllowed", absl::StatusCode::kUnimplemented, ApiReason::kMethodNotAllowed},
      {429, "TooManyRequests", absl::StatusCode::kResourceExhausted, ApiReason::kTooManyRequests},
      {500, "InternalError", absl::StatusCode::kInternal, ApiReason::kInternalError},
      {503, "ServiceUnavailable", absl::StatusCode::kUnavailable, ApiReason::kServiceUnavailable},
      {504, "Timeout", absl::StatusCode::kDeadlineExceeded, ApiReason::kTimeout},
      {502, "", absl::StatusCode::kUnavailable, ApiReason::kUnknown},
      {418, "", absl::StatusCode::kFailedPrecondition, ApiReason::kUnknown},
  };
  for (const ApiErrorCase& c : cases) {
    absl::Status s = ErrorFromResponse(c.http, StatusBody(c.http, c.reason, "boom"), nullptr,
                                       "GET /api/v1/pods");
    EXPECT_EQ(s.code(), c.code) << c.http << " " << c.reason;
    std::optional<ApiError> e = GetApiError(s);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->reason, c.api_reason) << c.reason;
    EXPECT_EQ(e->code, c.http);
    EXPECT_THAT(std::string(s.message()), HasSubstr("GET /api/v1/pods: boom"));
  }
}

TEST(ApiErrorTest, PredicatesTellTheReasonsApart) {
  absl::Status conflict =
      ErrorFromResponse(409, StatusBody(409, "Conflict", "stale"), nullptr, "PUT x");
  absl::Status exists =
      ErrorFromResponse(409, StatusBody(409, "AlreadyExists", "exists"), nullptr, "POST x");
  EXPECT_TRUE(IsApiConflict(conflict));
  EXPECT_FALSE(IsApiAlreadyExists(conflict));
  EXPECT_TRUE(IsApiAlreadyExists(exists));
  EXPECT_FALSE(IsApiConflict(exists));
  EXPECT_TRUE(IsApiGone(ErrorFromResponse(410, "", nullptr, "WATCH x")));
  EXPECT_TRUE(IsApiNotFound(ErrorFromResponse(404, "", nullptr, "GET x")));
  EXPECT_FALSE(IsApiNotFound(absl::NotFoundError("not from the API")));
  EXPECT_FALSE(IsApiNotFound(absl::OkStatus()));
}

TEST(ApiErrorTest, InvalidKeepsFieldCauses) {
  nlohmann::json body = {{"kind", "Status"},
                         {"code", 422},
                         {"reason", "Invalid"},
                         {"message", "TrainingJob \"x\" is invalid"},
                         {"details",
                          {{"kind", "TrainingJob"},
                           {"name", "x"},
                           {"causes",
                            {{{"reason", "FieldValueInvalid"},
                              {"message", "must be >= 0"},
                              {"field", "spec.replicaSpecs.Worker.replicas"}}}}}}};
  absl::Status s = ErrorFromResponse(422, body.dump(), nullptr, "POST x");
  EXPECT_TRUE(IsApiInvalid(s));
  std::optional<ApiError> e = GetApiError(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, "TrainingJob");
  EXPECT_EQ(e->name, "x");
  ASSERT_EQ(e->causes.size(), 1u);
  EXPECT_EQ(e->causes[0].field, "spec.replicaSpecs.Worker.replicas");
  EXPECT_EQ(e->causes[0].reason, "FieldValueInvalid");
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("spec.replicaSpecs.Worker.replicas: must be >= 0"));
}

TEST(ApiErrorTest, RetryAfterFromHeaderOrDetails) {
  std::string header = "7";
  absl::Status s = ErrorFromResponse(429, "", &header, "GET x");
  EXPECT_TRUE(IsApiThrottled(s));
  EXPECT_EQ(RetryAfter(s), absl::Seconds(7));
  nlohmann::json body = {{"kind", "Status"},
                         {"code", 429},
                         {"reason", "TooManyRequests"},
                         {"details", {{"retryAfterSeconds", 3}}}};
  EXPECT_EQ(RetryAfter(ErrorFromResponse(429, body.dump(), nullptr, "GET x")), absl::Seconds(3));
  std::string bad = "soon";
  EXPECT_EQ(RetryAfter(ErrorFromResponse(503, "", &bad, "GET x")), std::nullopt);
}

TEST(ApiErrorTest, GarbageBodiesAreErrorsNotCrashes) {
  const std::string bodies[] = {
      "",
      "<html>502 Bad Gateway</html>",
      "{\"kind\":\"Status\",\"code\":\"not a number\",\"details\":[1,2]}",
      "{\"kind\":\"Status\",\"details\":{\"causes\":[1,\"x\",{\"field\":7}]}}",
      std::string("\xff\xfe\x00\x01", 4),
      "[1,2,3]",
      "{\"kind\":\"Status\",\"message\":\"\xc3\x28\"}",  // invalid UTF-8
  };
  for (const std::string& body : bodies) {
    absl::Status s = ErrorFromResponse(500, body, nullptr, "GET x");
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(GetApiError(s).has_value());
  }
  EXPECT_THAT(
      std::string(
          ErrorFromResponse(502, "<html>502 Bad Gateway</html>", nullptr, "GET x").message()),
      HasSubstr("<html>502 Bad Gateway</html>"));
}

TEST(ApiErrorTest, WatchErrorEventStatus) {
  nlohmann::json status = {{"kind", "Status"},
                           {"code", 410},
                           {"reason", "Expired"},
                           {"message", "too old resource version: 5 (100)"}};
  absl::Status s = ErrorFromStatusObject(status, "watch");
  EXPECT_TRUE(IsApiGone(s));
  EXPECT_FALSE(ErrorFromStatusObject(nlohmann::json::array(), "watch").ok());
}

}  // namespace
}  // namespace lockstep::kube
