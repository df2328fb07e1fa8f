#include "operator/runtime/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/testing/fake_clock.h"

namespace lockstep::runtime {
namespace {

class WorkQueueTest : public ::testing::Test {
 protected:
  common::FakeClock clock_;
  WorkQueue queue_{&clock_};
};

TEST_F(WorkQueueTest, DedupesKeysWaitingInTheQueue) {
  queue_.Add("a");
  queue_.Add("b");
  queue_.Add("a");
  EXPECT_EQ(queue_.Len(), 2u);
  EXPECT_EQ(queue_.Get(), "a");
  EXPECT_EQ(queue_.Get(), "b");
}

TEST_F(WorkQueueTest, AKeyAddedWhileProcessingIsHandedOutAgainOnlyAfterDone) {
  queue_.Add("a");
  ASSERT_EQ(queue_.Get(), "a");
  queue_.Add("a");  // an event arrives while a worker reconciles "a"
  queue_.Add("a");
  EXPECT_EQ(queue_.Len(), 0u);  // not handed to a second worker
  queue_.Done("a");
  EXPECT_EQ(queue_.Len(), 1u);
  EXPECT_EQ(queue_.Get(), "a");
  queue_.Done("a");
  EXPECT_EQ(queue_.Len(), 0u);
}

TEST_F(WorkQueueTest, NoKeyIsProcessedByTwoWorkersAtOnce) {
  constexpr int kWorkers = 4;
  constexpr int kAdds = 2000;
  std::atomic<int> in_flight[3] = {0, 0, 0};
  std::atomic<bool> overlap{false};
  std::atomic<int> processed{0};
  std::vector<std::jthread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      while (std::optional<std::string> key = queue_.Get()) {
        int k = (*key)[0] - 'a';
        if (in_flight[k].fetch_add(1) != 0) overlap = true;
        std::this_thread::yield();
        in_flight[k].fetch_sub(1);
        ++processed;
        queue_.Done(*key);
      }
    });
  }
  for (int i = 0; i < kAdds; ++i) queue_.Add(std::string(1, static_cast<char>('a' + i % 3)));
  queue_.ShutDown();
  workers.clear();  // joins; ShutDown drains what is queued first
  EXPECT_FALSE(overlap.load());
  EXPECT_GE(processed.load(), 3);
  EXPECT_LE(processed.load(), kAdds);
}

TEST_F(WorkQueueTest, AddAfterWaitsForTheClockAndTheEarliestDelayWins) {
  queue_.AddAfter("a", absl::Seconds(10));
  queue_.AddAfter("a", absl::Seconds(3));
  queue_.AddAfter("a", absl::Seconds(20));
  EXPECT_EQ(queue_.Waiting(), 1u);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(queue_.Len(), 0u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(queue_.Len(), 1u);
  EXPECT_EQ(queue_.Waiting(), 0u);
  EXPECT_EQ(queue_.Get(), "a");
  queue_.Done("a");
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(queue_.Len(), 0u);  // the later delays were dropped, not queued again
  queue_.AddAfter("b", absl::ZeroDuration());
  EXPECT_EQ(queue_.Len(), 1u);
}

TEST_F(WorkQueueTest, RateLimitedBackoffDoublesPerKeyAndForgetResetsIt) {
  WorkQueue q(&clock_, {.base_delay = absl::Milliseconds(5), .max_delay = absl::Seconds(1)});
  absl::Duration expected[] = {absl::Milliseconds(5),   absl::Milliseconds(10),
                               absl::Milliseconds(20),  absl::Milliseconds(40),
                               absl::Milliseconds(80),  absl::Milliseconds(160),
                               absl::Milliseconds(320), absl::Milliseconds(640),
                               absl::Seconds(1),        absl::Seconds(1)};
  for (absl::Duration d : expected) {
    q.AddRateLimited("a");
    EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), d);
    clock_.Advance(d - absl::Nanoseconds(1));
    EXPECT_EQ(q.Len(), 0u);
    clock_.Advance(absl::Nanoseconds(1));
    ASSERT_EQ(q.Get(), "a");
    q.Done("a");
  }
  EXPECT_EQ(q.NumRequeues("a"), 10);
  EXPECT_EQ(q.NumRequeues("b"), 0);
  q.Forget("a");
  q.AddRateLimited("a");
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Milliseconds(5));
}

TEST_F(WorkQueueTest, ShutDownDrainsThenEndsAndIgnoresAdds) {
  queue_.Add("a");
  queue_.AddAfter("later", absl::Seconds(1));
  queue_.ShutDown();
  queue_.Add("b");
  EXPECT_TRUE(queue_.shutting_down());
  EXPECT_EQ(queue_.Get(), "a");
  EXPECT_EQ(queue_.Get(), std::nullopt);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(queue_.Get(), std::nullopt);
  EXPECT_EQ(clock_.PendingTimers(), 0u);
}

TEST_F(WorkQueueTest, ShutDownNowDropsWhatIsQueued) {
  queue_.Add("a");
  queue_.Add("b");
  ASSERT_EQ(queue_.Get(), "a");  // in flight
  queue_.Add("a");               // dirty: would be queued again at Done
  queue_.AddAfter("later", absl::Seconds(1));
  queue_.ShutDownNow();
  EXPECT_EQ(queue_.Get(), std::nullopt);
  queue_.Done("a");
  EXPECT_EQ(queue_.Get(), std::nullopt);
  EXPECT_EQ(queue_.Len(), 0u);
  EXPECT_EQ(clock_.PendingTimers(), 0u);
}

TEST_F(WorkQueueTest, ShutDownWakesABlockedWorker) {
  std::jthread worker([&] { EXPECT_EQ(queue_.Get(), std::nullopt); });
  queue_.ShutDown();
}

TEST_F(WorkQueueTest, TimersThatOutliveTheQueueAreHarmless) {
  {
    WorkQueue q(&clock_);
    q.AddAfter("a", absl::Seconds(1));
  }
  clock_.Advance(absl::Seconds(2));  // the queue cancelled its timers when it shut down
  EXPECT_EQ(clock_.PendingTimers(), 0u);
}

}  // namespace
}  // namespace lockstep::runtime
