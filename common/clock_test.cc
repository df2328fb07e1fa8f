#include <gtest/gtest.h>

#include <thread>

#include "common/clock.h"
#include "common/testing/fake_clock.h"

namespace lockstep::common {
namespace {

TEST(FakeClockTest, TimersRunInDeadlineOrderWhenTimeReachesThem) {
  FakeClock clock;
  std::vector<int> fired;
  absl::Time t0 = clock.Monotonic();
  clock.Schedule(t0 + absl::Seconds(2), [&] { fired.push_back(2); });
  clock.Schedule(t0 + absl::Seconds(1), [&] { fired.push_back(1); });
  Clock::TimerId cancelled = clock.Schedule(t0 + absl::Seconds(1), [&] { fired.push_back(99); });
  clock.Cancel(cancelled);
  clock.Advance(absl::Milliseconds(999));
  EXPECT_TRUE(fired.empty());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(fired, std::vector<int>({1}));
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(fired, std::vector<int>({1, 2}));
  EXPECT_EQ(clock.Monotonic() - t0, absl::Seconds(6));
  clock.Schedule(t0, [&] { fired.push_back(0); });  // already due: runs at once
  EXPECT_EQ(fired.back(), 0);
}

TEST(FakeClockTest, SleepWakesOnAdvanceOrStop) {
  FakeClock clock;
  std::jthread sleeper([&] { EXPECT_TRUE(clock.SleepFor(absl::Seconds(10))); });
  clock.WaitForTimers(1);
  clock.Advance(absl::Seconds(10));
  sleeper.join();

  std::stop_source stop;
  std::jthread stopped([&] { EXPECT_FALSE(clock.SleepFor(absl::Hours(1), stop.get_token())); });
  clock.WaitForTimers(1);
  stop.request_stop();
  stopped.join();
  EXPECT_EQ(clock.PendingTimers(), 0u);  // the stopped sleep cancelled its timer
}

TEST(RealClockTest, TimersAndSleepsUseTheSteadyClock) {
  std::unique_ptr<Clock> clock = NewRealClock();
  absl::Time before = clock->Monotonic();
  EXPECT_TRUE(clock->SleepFor(absl::Milliseconds(20)));
  EXPECT_GE(clock->Monotonic() - before, absl::Milliseconds(20));
  std::stop_source stop;
  stop.request_stop();
  EXPECT_FALSE(clock->SleepFor(absl::Hours(1), stop.get_token()));
}

}  // namespace
}  // namespace lockstep::common
