#include "operator/runtime/event_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/kube/testing/fake_clock.h"
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
  kube::FakeClock clock_;
  EventRecorder recorder_{&client_, &clock_, {.window = absl::Minutes(10), .max_tracked = 2}};
  ObjectReference job_{"lockstep.io/v1alpha1", "TrainingJob", "ml", "mnist", "uid-1"};
};

TEST_F(EventRecorderTest, FirstEventIsCreatedWithTheObjectReference) {
  recorder_.Record(job_, EventType::kNormal, "Created", "created pod mnist-worker-0");
  ASSERT_EQ(server_.size(), 1u);
  std::vector<std::string> log = server_.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "POST /api/v1/namespaces/ml/events");
}

TEST_F(EventRecorderTest, RepeatsWithinTheWindowBumpTheCount) {
  for (int i = 0; i < 3; ++i) {
    recorder_.Record(job_, EventType::kWarning, "Restarting", "worker-1 exited 137");
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
  recorder_.Record(job_, EventType::kNormal, "Created", "a");
  recorder_.Record(job_, EventType::kNormal, "Created", "b");
  clock_.Advance(absl::Minutes(11));
  recorder_.Record(job_, EventType::kNormal, "Created", "a");
  EXPECT_EQ(server_.size(), 3u);
}

TEST_F(EventRecorderTest, TracksABoundedNumberOfDistinctEvents) {
  recorder_.Record(job_, EventType::kNormal, "R", "1");
  recorder_.Record(job_, EventType::kNormal, "R", "2");
  recorder_.Record(job_, EventType::kNormal, "R", "3");  // evicts "1"
  recorder_.Record(job_, EventType::kNormal, "R", "1");  // so this is a new event
  EXPECT_EQ(server_.size(), 4u);
}

TEST_F(EventRecorderTest, FailuresAreSwallowed) {
  server_.set_down(true);
  recorder_.Record(job_, EventType::kNormal, "Created", "x");
  server_.set_down(false);
  EXPECT_EQ(server_.size(), 0u);
  recorder_.Record(job_, EventType::kNormal, "Created", "x");  // created now, not patched
  EXPECT_EQ(server_.size(), 1u);
  EXPECT_THAT(server_.log(), ElementsAre(StartsWith("POST ")));
}

TEST_F(EventRecorderTest, AnEventTheServerExpiredIsCreatedAgain) {
  recorder_.Record(job_, EventType::kNormal, "Created", "x");
  server_.Clear();
  recorder_.Record(job_, EventType::kNormal, "Created", "x");
  EXPECT_EQ(server_.size(), 1u);
  EXPECT_THAT(server_.log(),
              ElementsAre(StartsWith("POST "), StartsWith("PATCH "), StartsWith("POST ")));
}

}  // namespace
}  // namespace lockstep::runtime
