#include "operator/runtime/event_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/testing/fake_clock.h"
#include "operator/runtime/testing/fake_object_server.h"

namespace lockstep::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;

class EventRecorderTest : public ::testing::Test {
 protected:
  std::shared_ptr<kube::FakeTransport> transport_ = std::make_shared<kube::FakeTransport>();
  testing::FakeObjectServer server_{transport_.get()};
  kube::RestClient client_{transport_};
  common::FakeClock clock_;
  EventRecorder recorder_{
      &client_, &clock_, {.window = absl::Minutes(10), .max_tracked = 2, .qps = 0}};
  // Records, then waits until the writer has written it.
  void Record(EventType type, const std::string& reason, const std::string& message) {
    recorder_.Record(job_, type, reason, message);
    ASSERT_TRUE(recorder_.Flush());
  }
  ObjectReference job_{"lockstep.io/v1alpha1", "TrainingJob", "ml", "mnist", "uid-1"};
};

TEST_F(EventRecorderTest, FirstEventIsCreatedWithTheObjectReference) {
  Record(EventType::kNormal, "Created", "created pod mnist-worker-0");
  ASSERT_EQ(server_.size(), 1u);
  std::vector<std::string> log = server_.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "POST /api/v1/namespaces/ml/events");
}

TEST_F(EventRecorderTest, RepeatsWithinTheWindowBumpTheCount) {
  for (int i = 0; i < 3; ++i) {
    Record(EventType::kWarning, "Restarting", "worker-1 exited 137");
    clock_.Advance(absl::Minutes(1));
  }
  EXPECT_EQ(server_.size(), 1u);
  std::vector<std::string> log = server_.log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_THAT(log[1], StartsWith("PATCH /api/v1/namespaces/ml/events/mnist."));
  std::string path = log[1].substr(6);
  nlohmann::json event = server_.Get(path).value();
  EXPECT_EQ(event["count"], 3);
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["involvedObject"]["uid"], "uid-1");
  EXPECT_NE(event["firstTimestamp"], event["lastTimestamp"]);
}

TEST_F(EventRecorderTest, DifferentMessagesAndExpiredWindowsMakeNewEvents) {
  Record(EventType::kNormal, "Created", "a");
  Record(EventType::kNormal, "Created", "b");
  clock_.Advance(absl::Minutes(11));
  Record(EventType::kNormal, "Created", "a");
  EXPECT_EQ(server_.size(), 3u);
}

TEST_F(EventRecorderTest, TracksABoundedNumberOfDistinctEvents) {
  Record(EventType::kNormal, "R", "1");
  Record(EventType::kNormal, "R", "2");
  Record(EventType::kNormal, "R", "3");  // evicts "1"
  Record(EventType::kNormal, "R", "1");  // so this is a new event
  EXPECT_EQ(server_.size(), 4u);
}

TEST_F(EventRecorderTest, FailuresAreSwallowed) {
  server_.set_down(true);
  Record(EventType::kNormal, "Created", "x");
  server_.set_down(false);
  EXPECT_EQ(server_.size(), 0u);
  Record(EventType::kNormal, "Created", "x");  // created now, not patched
  EXPECT_EQ(server_.size(), 1u);
  EXPECT_THAT(server_.log(), ElementsAre(StartsWith("POST ")));
}

TEST_F(EventRecorderTest, AnEventTheServerExpiredIsCreatedAgain) {
  Record(EventType::kNormal, "Created", "x");
  server_.Clear();
  Record(EventType::kNormal, "Created", "x");
  EXPECT_EQ(server_.size(), 1u);
  EXPECT_THAT(server_.log(),
              ElementsAre(StartsWith("POST "), StartsWith("PATCH "), StartsWith("POST ")));
}

double Outcome(const common::MetricsRegistry& m, const std::string& outcome) {
  return m.Value("lockstep_events_total", {{"outcome", outcome}});
}

TEST_F(EventRecorderTest, TheSpamFilterLimitsEachObjectAlone) {
  common::MetricsRegistry metrics;
  EventRecorder recorder(
      &client_, &clock_,
      {.qps = 0, .object_qps = 1.0 / 300, .object_burst = 3, .metrics = &metrics});
  ObjectReference other{"lockstep.io/v1alpha1", "TrainingJob", "ml", "other", "uid-2"};
  for (int i = 0; i < 5; ++i) {
    recorder.Record(job_, EventType::kNormal, "Reason" + std::to_string(i), "m");
  }
  recorder.Record(other, EventType::kNormal, "Reason0", "m");
  ASSERT_TRUE(recorder.Flush());
  EXPECT_EQ(server_.size(), 4u);  // 3 of the job's 5, and the other job's one
  EXPECT_EQ(Outcome(metrics, "dropped_spam"), 2);
  EXPECT_EQ(Outcome(metrics, "created"), 4);
  clock_.Advance(absl::Minutes(5));  // one token back
  recorder.Record(job_, EventType::kNormal, "Reason5", "m");
  recorder.Record(job_, EventType::kNormal, "Reason6", "m");
  ASSERT_TRUE(recorder.Flush());
  EXPECT_EQ(server_.size(), 5u);
  EXPECT_EQ(Outcome(metrics, "dropped_spam"), 3);
}

// The issue's case: past the spam filter's 25 events a job failed and its BackoffLimitExceeded
// was dropped, so kubectl describe ended on a restart. State changes are essential: they pass
// the filter and aggregation, and a full queue makes room for them.
TEST_F(EventRecorderTest, EssentialEventsPassTheSpamFilterAggregationAndAFullQueue) {
  common::MetricsRegistry metrics;
  EventRecorder recorder(&client_, &clock_,
                         {.qps = 0, .object_burst = 3, .similar_max = 2, .metrics = &metrics});
  for (int i = 0; i < 10; ++i) {
    recorder.Record(job_, EventType::kWarning, "WorkerFailed",
                    "pod restarted " + std::to_string(i));
  }
  recorder.Record(job_, EventType::kWarning, "Restarting", "restart 1", /*essential=*/true);
  recorder.Record(job_, EventType::kWarning, "Restarting", "restart 2", /*essential=*/true);
  recorder.Record(job_, EventType::kWarning, "Restarting", "restart 3", /*essential=*/true);
  recorder.Record(job_, EventType::kWarning, "BackoffLimitExceeded", "over the limit",
                  /*essential=*/true);
  ASSERT_TRUE(recorder.Flush());
  EXPECT_EQ(Outcome(metrics, "dropped_spam"), 7);
  EXPECT_EQ(server_.size(), 3u + 4u);  // every essential one, each whole (none combined)
  std::vector<std::string> messages;
  for (const nlohmann::json& e : server_.List("/api/v1/namespaces/ml/events")) {
    messages.push_back(e["message"].get<std::string>());
  }
  EXPECT_THAT(messages,
              ::testing::IsSupersetOf({"restart 1", "restart 2", "restart 3", "over the limit"}));

  // A full queue of Warnings: an essential Normal event still gets in, in the place of the
  // oldest event that is not essential, and is written.
  EventRecorder slow(&client_, &clock_,
                     {.qps = 1, .burst = 1, .object_burst = 100000, .queue_size = 4});
  ObjectReference other{"lockstep.io/v1alpha1", "TrainingJob", "ops", "done", "uid-7"};
  for (int i = 0; i < 20; ++i) {
    slow.Record(other, EventType::kWarning, "Flood" + std::to_string(i), "m");
  }
  slow.Record(other, EventType::kNormal, "ChiefSucceeded", "the chief succeeded", true);
  for (int i = 0; i < 1000 && !slow.Flush(absl::Milliseconds(1)); ++i) {
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_TRUE(slow.Flush(absl::Milliseconds(1)));
  bool written = false;
  for (const nlohmann::json& e : server_.List("/api/v1/namespaces/ops/events")) {
    written = written || e["reason"] == "ChiefSucceeded";
  }
  EXPECT_TRUE(written);
}

TEST_F(EventRecorderTest, ManyDifferentMessagesOfOneReasonAreCombined) {
  EventRecorder recorder(&client_, &clock_, {.qps = 0, .similar_max = 3});
  for (int i = 0; i < 6; ++i) {
    recorder.Record(job_, EventType::kNormal, "SuccessfulCreatePod",
                    "Created pod mnist-worker-" + std::to_string(i));
  }
  ASSERT_TRUE(recorder.Flush());
  ASSERT_EQ(server_.size(), 4u);  // 3 as they were, then one combined
  std::vector<std::string> log = server_.log();
  ASSERT_EQ(log.size(), 6u);
  EXPECT_THAT(log[3], StartsWith("POST "));
  EXPECT_THAT(log[5], StartsWith("PATCH /api/v1/namespaces/ml/events/mnist."));
  nlohmann::json combined = server_.Get(log[5].substr(6)).value();
  EXPECT_EQ(combined["message"], "(combined from similar events): Created pod mnist-worker-5");
  EXPECT_EQ(combined["count"], 3);
  // A new window starts afresh: a new Event of its own, not a patch of the combined one.
  clock_.Advance(absl::Minutes(11));
  recorder.Record(job_, EventType::kNormal, "SuccessfulCreatePod", "Created pod mnist-worker-9");
  ASSERT_TRUE(recorder.Flush());
  EXPECT_EQ(server_.size(), 5u);
  EXPECT_THAT(server_.log().back(), StartsWith("POST "));
}

// The issue's case: a flood of events about one job must not delay another job's pod. Events
// have a budget of their own and a writer of their own: Record() returns at once (the fake
// clock never moves while the flood is recorded), and the client's budget is left whole.
TEST_F(EventRecorderTest, AFloodOfEventsNeverDelaysAnotherJobsPod) {
  auto budget = std::make_shared<kube::TokenBucket>(/*qps=*/1, /*burst=*/2, &clock_);
  kube::RestClient throttled(transport_, {.throttle = budget});
  common::MetricsRegistry metrics;
  EventRecorder recorder(
      &throttled, &clock_,
      {.qps = 1, .burst = 1, .object_burst = 100000, .queue_size = 100, .metrics = &metrics});
  const absl::Time start = clock_.Monotonic();
  for (int i = 0; i < 1000; ++i) {
    recorder.Record(job_, EventType::kWarning, "Flood" + std::to_string(i), "m");
  }
  const absl::Duration waited = kube::TokenBucket::WaitedOnThisThread();
  nlohmann::json pod = {{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata", {{"name", "other-worker-0"}, {"namespace", "ml"}}}};
  ASSERT_TRUE(throttled.Create(kube::resources::kPods, "ml", pod).ok());
  EXPECT_EQ(kube::TokenBucket::WaitedOnThisThread(), waited);  // the pod did not wait
  EXPECT_EQ(clock_.Monotonic(), start);
  EXPECT_TRUE(budget->TryAccept());  // the events took none of the client's budget
  EXPECT_TRUE(server_.Get("/api/v1/namespaces/ml/pods/other-worker-0").has_value());
  EXPECT_GE(Outcome(metrics, "dropped_queue_full"), 1000 - 100 - 2);

  // The events still queued are written at the events' own pace.
  for (int i = 0; i < 1000 && !recorder.Flush(absl::Milliseconds(1)); ++i) {
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_TRUE(recorder.Flush(absl::Milliseconds(1)));
  EXPECT_EQ(Outcome(metrics, "created") + Outcome(metrics, "dropped_queue_full"), 1000);
  EXPECT_EQ(server_.size(), 1 + static_cast<size_t>(Outcome(metrics, "created")));
}

TEST_F(EventRecorderTest, AWarningTakesThePlaceOfANormalEventInAFullQueue) {
  common::MetricsRegistry metrics;
  EventRecorder recorder(
      &client_, &clock_,
      {.qps = 1, .burst = 1, .object_burst = 100000, .queue_size = 10, .metrics = &metrics});
  for (int i = 0; i < 50; ++i) {
    recorder.Record(job_, EventType::kNormal, "Created" + std::to_string(i), "m");
  }
  ObjectReference other{"lockstep.io/v1alpha1", "TrainingJob", "ops", "failing", "uid-9"};
  recorder.Record(other, EventType::kWarning, "FailedCreate", "quota exceeded");
  for (int i = 0; i < 1000 && !recorder.Flush(absl::Milliseconds(1)); ++i) {
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_TRUE(recorder.Flush(absl::Milliseconds(1)));
  EXPECT_THAT(server_.log(), ::testing::Contains("POST /api/v1/namespaces/ops/events"));
  // 50 Normal events and a Warning, of which the queue held 10 and the writer 1 at a time.
  EXPECT_EQ(Outcome(metrics, "created") + Outcome(metrics, "dropped_queue_full"), 51);
}

}  // namespace
}  // namespace lockstep::runtime
