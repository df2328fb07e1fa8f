#include "operator/kube/rest_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/fake_clock.h"
#include "operator/kube/api_error.h"
#include "operator/kube/testing/fake_transport.h"

namespace lockstep::kube {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class RestClientTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeTransport> transport_ = std::make_shared<FakeTransport>();
  RestClient client_{transport_};

  HttpRequest Last() { return transport_->requests().back(); }
};

TEST_F(RestClientTest, PathsForCoreAndCustomResources) {
  EXPECT_EQ(RestClient::Path(resources::kPods, "ns", "p", "status"),
            "/api/v1/namespaces/ns/pods/p/status");
  EXPECT_EQ(RestClient::Path(resources::kTrainingJobs, "ml", "j"),
            "/apis/lockstep.io/v1alpha1/namespaces/ml/trainingjobs/j");
  EXPECT_EQ(RestClient::Path(resources::kPods, ""), "/api/v1/pods");
  EXPECT_EQ(RestClient::Path(resources::kNamespaces, "ignored", "default"),
            "/api/v1/namespaces/default");
  EXPECT_EQ(RestClient::Path(resources::kPods, "ns", "a/b?c"),
            "/api/v1/namespaces/ns/pods/a%2Fb%3Fc");
}

TEST_F(RestClientTest, GetReturnsTheObjectAndSendsHeaders) {
  transport_->QueueResponse(200, R"({"kind":"Pod","metadata":{"name":"p"}})");
  absl::StatusOr<json> pod = client_.Get(resources::kPods, "ns", "p");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ((*pod)["metadata"]["name"], "p");
  HttpRequest r = Last();
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/api/v1/namespaces/ns/pods/p");
  ASSERT_NE(r.Header("accept"), nullptr);
  EXPECT_EQ(*r.Header("Accept"), "application/json");
  ASSERT_NE(r.Header("User-Agent"), nullptr);
}

TEST_F(RestClientTest, ListEncodesSelectorsAndFollowsContinueTokens) {
  transport_->QueueResponse(
      200, R"({"metadata":{"resourceVersion":"10","continue":"tok 1"},"items":[{"n":1},{"n":2}]})");
  transport_->QueueResponse(
      200, R"({"metadata":{"resourceVersion":"10","continue":"tok2"},"items":[{"n":3}]})");
  transport_->QueueResponse(200, R"({"metadata":{"resourceVersion":"10"},"items":[{"n":4}]})");
  absl::StatusOr<json> all = client_.ListAll(
      resources::kPods, "ns", {.label_selector = "app=web,tier in (a,b)", .limit = 2});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)["items"].size(), 4u);
  EXPECT_EQ((*all)["items"][3]["n"], 4);
  EXPECT_EQ((*all)["metadata"]["resourceVersion"], "10");
  EXPECT_FALSE((*all)["metadata"].contains("continue"));
  std::vector<HttpRequest> reqs = transport_->requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].target,
            "/api/v1/namespaces/ns/pods?labelSelector=app%3Dweb%2Ctier%20in%20%28a%2Cb%29&limit=2");
  EXPECT_THAT(reqs[1].target, HasSubstr("continue=tok%201"));
  EXPECT_THAT(reqs[2].target, HasSubstr("continue=tok2"));
}

TEST_F(RestClientTest, ListAllReturnsGoneWhenTheContinueTokenExpired) {
  transport_->QueueResponse(200,
                            R"({"metadata":{"resourceVersion":"10","continue":"t"},"items":[]})");
  transport_->QueueResponse(
      410, R"({"kind":"Status","code":410,"reason":"Expired","message":"continue token expired"})");
  absl::StatusOr<json> all = client_.ListAll(resources::kPods, "ns", {.limit = 1});
  EXPECT_TRUE(IsApiGone(all.status())) << all.status();
}

TEST_F(RestClientTest, CreateUpdateStatusPatchDelete) {
  json job = {{"metadata", {{"name", "j"}, {"resourceVersion", "5"}}}, {"spec", json::object()}};
  for (int i = 0; i < 6; ++i) transport_->QueueResponse(200, R"({"ok":true})");
  ASSERT_TRUE(client_.Create(resources::kTrainingJobs, "ml", job).ok());
  EXPECT_EQ(Last().method, "POST");
  EXPECT_EQ(Last().target, "/apis/lockstep.io/v1alpha1/namespaces/ml/trainingjobs");
  EXPECT_EQ(json::parse(Last().body), job);
  ASSERT_TRUE(client_.Update(resources::kTrainingJobs, "ml", job).ok());
  EXPECT_EQ(Last().method, "PUT");
  EXPECT_EQ(Last().target, "/apis/lockstep.io/v1alpha1/namespaces/ml/trainingjobs/j");
  ASSERT_TRUE(client_.UpdateStatus(resources::kTrainingJobs, "ml", job).ok());
  EXPECT_EQ(Last().target, "/apis/lockstep.io/v1alpha1/namespaces/ml/trainingjobs/j/status");

  ASSERT_TRUE(client_
                  .Patch(resources::kPods, "ml", "p", PatchType::kStrategicMerge,
                         {{"metadata", {{"labels", {{"a", "b"}}}}}})
                  .ok());
  EXPECT_EQ(Last().method, "PATCH");
  EXPECT_EQ(*Last().Header("Content-Type"), "application/strategic-merge-patch+json");
  ASSERT_TRUE(client_
                  .Patch(resources::kPods, "ml", "p", PatchType::kJson,
                         json::array({{{"op", "remove"}, {"path", "/metadata/labels/a"}}}),
                         "status")
                  .ok());
  EXPECT_EQ(*Last().Header("Content-Type"), "application/json-patch+json");
  EXPECT_EQ(Last().target, "/api/v1/namespaces/ml/pods/p/status");

  ASSERT_TRUE(client_
                  .Delete(resources::kPods, "ml", "p",
                          {.precondition_uid = "u1",
                           .propagation_policy = "Foreground",
                           .grace_period_seconds = 0})
                  .ok());
  EXPECT_EQ(Last().method, "DELETE");
  json body = json::parse(Last().body);
  EXPECT_EQ(body["preconditions"]["uid"], "u1");
  EXPECT_EQ(body["propagationPolicy"], "Foreground");
  EXPECT_EQ(body["gracePeriodSeconds"], 0);
}

TEST_F(RestClientTest, UpdateWithoutANameIsRejectedBeforeSending) {
  absl::StatusOr<json> r = client_.Update(resources::kPods, "ns", json::object());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(transport_->requests().empty());
}

TEST_F(RestClientTest, HttpErrorsBecomeTypedErrors) {
  transport_->QueueResponse(
      409,
      R"({"kind":"Status","code":409,"reason":"Conflict","message":"the object has been modified"})");
  absl::StatusOr<json> r = client_.Update(resources::kPods, "ns", {{"metadata", {{"name", "p"}}}});
  EXPECT_TRUE(IsApiConflict(r.status()));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("PUT /api/v1/namespaces/ns/pods/p: the object has been modified"));
}

TEST_F(RestClientTest, MalformedSuccessBodiesAreDataLoss) {
  for (const char* body : {"", "not json", "[1]", "{\"truncated\":", "\"string\""}) {
    transport_->QueueResponse(200, body);
    absl::StatusOr<json> r = client_.Get(resources::kPods, "ns", "p");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << body;
  }
}

TEST_F(RestClientTest, TransportFailuresKeepTheirCodeAndNameTheRequest) {
  transport_->QueueError(absl::UnavailableError("connection refused"));
  absl::StatusOr<json> r = client_.Get(resources::kPods, "ns", "p");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("GET /api/v1/namespaces/ns/pods/p: connection refused"));
}

TEST_F(RestClientTest, ThrottleDelaysRequestsBeyondTheBurst) {
  common::FakeClock clock;
  auto bucket = std::make_shared<TokenBucket>(/*qps=*/10, /*burst=*/2, &clock);
  RestClient throttled(transport_, {.throttle = bucket});
  for (int i = 0; i < 2; ++i) {
    transport_->QueueResponse(200, "{}");
    ASSERT_TRUE(throttled.Get(resources::kPods, "ns", "p").ok());
  }
  EXPECT_EQ(clock.PendingTimers(), 0u);  // the burst went through without waiting
  transport_->QueueResponse(200, "{}");
  std::thread third([&] { EXPECT_TRUE(throttled.Get(resources::kPods, "ns", "p").ok()); });
  clock.WaitForTimers(1);
  EXPECT_EQ(clock.NextDeadline() - clock.Monotonic(), absl::Milliseconds(100));
  EXPECT_EQ(transport_->requests().size(), 2u);
  clock.Advance(absl::Milliseconds(100));
  third.join();
  EXPECT_EQ(transport_->requests().size(), 3u);
}

// A stopping process: a request waiting for the throttle goes at once, and so do the next.
TEST_F(RestClientTest, AStopEndsTheWaitsForTheThrottle) {
  common::FakeClock clock;
  auto bucket = std::make_shared<TokenBucket>(/*qps=*/1, /*burst=*/1, &clock);
  std::stop_source stop;
  RestClient throttled(transport_, {.throttle = bucket, .stop = stop.get_token()});
  for (int i = 0; i < 4; ++i) transport_->QueueResponse(200, "{}");
  ASSERT_TRUE(throttled.Get(resources::kPods, "ns", "p").ok());
  std::thread waiting([&] { EXPECT_TRUE(throttled.Get(resources::kPods, "ns", "p").ok()); });
  clock.WaitForTimers(1);  // asleep for a second
  stop.request_stop();
  waiting.join();
  EXPECT_TRUE(throttled.Get(resources::kPods, "ns", "p").ok());
  EXPECT_TRUE(throttled.Get(resources::kPods, "ns", "p").ok());
  EXPECT_EQ(transport_->requests().size(), 4u);
  EXPECT_EQ(clock.Monotonic(), common::FakeClock().Monotonic());  // no time had to pass
}

TEST_F(RestClientTest, WatchDecodesEventsSplitAcrossChunks) {
  std::shared_ptr<FakeBody> body = transport_->QueueStream();
  absl::StatusOr<std::unique_ptr<WatchStream>> w =
      client_.Watch(resources::kPods, "ns", {.resource_version = "7", .timeout_seconds = 300});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(Last().target,
            "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=7&allowWatchBookmarks=true&"
            "timeoutSeconds=300");
  body->Push(R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})"
             "\n"
             R"({"type":"MODI)");
  body->Push(R"(FIED","object":{"metadata":{"name":"b"}}})"
             "\n\n");
  body->Push(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})");
  body->End();  // the last line has no newline: still an event
  auto e1 = (*w)->Next();
  ASSERT_TRUE(e1.ok() && e1->has_value());
  EXPECT_EQ((**e1).type, WatchEvent::Type::kAdded);
  auto e2 = (*w)->Next();
  ASSERT_TRUE(e2.ok() && e2->has_value());
  EXPECT_EQ((**e2).type, WatchEvent::Type::kModified);
  EXPECT_EQ((**e2).object["metadata"]["name"], "b");
  auto e3 = (*w)->Next();
  ASSERT_TRUE(e3.ok() && e3->has_value());
  EXPECT_EQ((**e3).type, WatchEvent::Type::kBookmark);
  auto end = (*w)->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST_F(RestClientTest, WatchRejectsMalformedLines) {
  const char* lines[] = {
      "not json\n",
      "[1,2]\n",
      R"({"type":"ADDED"})"
      "\n",
      R"({"type":"ADDED","object":"x"})"
      "\n",
      R"({"type":"EXPLODED","object":{}})"
      "\n",
      R"({"type":7,"object":{}})"
      "\n",
  };
  for (const char* line : lines) {
    std::shared_ptr<FakeBody> body = transport_->QueueStream();
    auto w = client_.Watch(resources::kPods, "ns");
    ASSERT_TRUE(w.ok());
    body->Push(line);
    auto e = (*w)->Next();
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << line;
  }
}

TEST_F(RestClientTest, WatchErrorResponseAndBrokenStream) {
  std::shared_ptr<FakeBody> gone = transport_->QueueStream(410);
  gone->Push(R"({"kind":"Status","code":410,"reason":"Expired","message":"too old"})");
  gone->End();
  auto w = client_.Watch(resources::kPods, "ns", {.resource_version = "1"});
  EXPECT_TRUE(IsApiGone(w.status())) << w.status();

  std::shared_ptr<FakeBody> body = transport_->QueueStream();
  auto w2 = client_.Watch(resources::kPods, "ns");
  ASSERT_TRUE(w2.ok());
  body->Fail(absl::UnavailableError("connection reset"));
  EXPECT_EQ((*w2)->Next().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RestClientTest, CancelUnblocksAWatch) {
  std::shared_ptr<FakeBody> body = transport_->QueueStream();
  auto w = client_.Watch(resources::kPods, "ns");
  ASSERT_TRUE(w.ok());
  std::thread reader(
      [&] { EXPECT_EQ((*w)->Next().status().code(), absl::StatusCode::kCancelled); });
  (*w)->Cancel();
  reader.join();
  EXPECT_TRUE(body->cancelled());
}

}  // namespace
}  // namespace lockstep::kube
