#include "operator/runtime/controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/testing/fake_clock.h"
#include "operator/kube/api_error.h"

namespace lockstep::runtime {
namespace {

class ControllerTest : public ::testing::Test {
 protected:
  // Runs one key through the controller with the given outcome.
  void Process(absl::StatusOr<ReconcileResult> outcome) {
    Controller c("test", &queue_, [&](const std::string&) { return outcome; });
    ASSERT_EQ(queue_.Get(), "k");
    c.ProcessOne("k");
    queue_.Done("k");
  }

  common::FakeClock clock_;
  WorkQueue queue_{&clock_};
};

TEST_F(ControllerTest, SuccessForgetsTheBackoff) {
  queue_.AddRateLimited("k");
  clock_.Advance(absl::Seconds(1));
  Process(ReconcileResult{});
  EXPECT_EQ(queue_.NumRequeues("k"), 0);
  EXPECT_EQ(queue_.Len() + queue_.Waiting(), 0u);
}

TEST_F(ControllerTest, RequeueAfterSchedulesTheKey) {
  queue_.Add("k");
  Process(ReconcileResult{.requeue_after = absl::Seconds(30)});
  EXPECT_EQ(queue_.Waiting(), 1u);
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Seconds(30));
}

TEST_F(ControllerTest, RetryableErrorsBackOffPerKey) {
  queue_.Add("k");
  Process(absl::UnavailableError("apiserver down"));
  EXPECT_EQ(queue_.NumRequeues("k"), 1);
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Milliseconds(5));
  clock_.Advance(absl::Milliseconds(5));
  Process(kube::ErrorFromResponse(409, "", nullptr, "PUT x"));  // conflict: retried too
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Milliseconds(10));
}

TEST_F(ControllerTest, TerminalErrorsAreNotRetried) {
  queue_.Add("k");
  Process(absl::InvalidArgumentError("spec is invalid"));
  EXPECT_EQ(queue_.Len() + queue_.Waiting(), 0u);
  EXPECT_EQ(queue_.NumRequeues("k"), 0);
}

TEST_F(ControllerTest, ThrottledErrorsWaitAsTheServerAsked) {
  queue_.Add("k");
  std::string after = "4";
  Process(kube::ErrorFromResponse(429, "", &after, "GET x"));
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Seconds(4));
}

// A stop with a full queue ends the run once the reconciles in flight are done, without
// working through the backlog (a stopping operator must exit within its grace period).
TEST_F(ControllerTest, AStopWithAFullQueueFinishesOnlyTheReconcilesInFlight) {
  std::latch started(2), release(1);
  std::atomic<int> reconciled{0};
  Controller c(
      "test", &queue_,
      [&](const std::string&) -> absl::StatusOr<ReconcileResult> {
        if (reconciled.fetch_add(1) < 2) {
          started.count_down();
          release.wait();
        }
        return ReconcileResult{};
      },
      /*workers=*/2);
  for (int i = 0; i < 1000; ++i) queue_.Add("k" + std::to_string(i));
  std::stop_source stop;
  std::thread run([&] { c.Run(stop.get_token()); });
  started.wait();  // both workers are in a reconcile
  stop.request_stop();
  while (!queue_.shutting_down()) std::this_thread::yield();
  release.count_down();
  run.join();
  EXPECT_EQ(reconciled.load(), 2);
}

TEST_F(ControllerTest, AnExceptionFromTheReconcilerIsRetriedNotPropagated) {
  Controller c("test", &queue_, [](const std::string&) -> absl::StatusOr<ReconcileResult> {
    throw std::runtime_error("bug");
  });
  queue_.Add("k");
  ASSERT_EQ(queue_.Get(), "k");
  c.ProcessOne("k");
  queue_.Done("k");
  EXPECT_EQ(queue_.NumRequeues("k"), 1);
}

TEST_F(ControllerTest, WorkersProcessKeysConcurrentlyButNeverTheSameKeyTwice) {
  std::unique_ptr<common::Clock> real = common::NewRealClock();
  WorkQueue queue(real.get());
  std::mutex mu;
  std::set<std::string> active;
  std::set<std::string> done;
  bool overlap = false;
  std::latch all_done(20);
  Controller c(
      "test", &queue,
      [&](const std::string& key) -> absl::StatusOr<ReconcileResult> {
        {
          std::lock_guard lock(mu);
          if (!active.insert(key).second) overlap = true;
        }
        std::this_thread::yield();
        std::lock_guard lock(mu);
        active.erase(key);
        if (done.insert(key).second) all_done.count_down();
        return ReconcileResult{};
      },
      /*workers=*/3);
  std::jthread run([&](std::stop_token stop) { c.Run(stop); });
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 20; ++i) queue.Add("key-" + std::to_string(i));
  }
  all_done.wait();
  run.request_stop();
  run.join();
  EXPECT_FALSE(overlap);
  EXPECT_EQ(done.size(), 20u);
  EXPECT_TRUE(queue.shutting_down());
}

}  // namespace
}  // namespace lockstep::runtime
