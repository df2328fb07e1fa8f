#pragma once
// FakeClock: time that moves only when a test calls Advance(). Due timers run inside
// Advance(), in deadline order, on the test's thread. WaitForTimers() lets a test wait until
// another thread has gone to sleep on the clock, which replaces sleeps in tests.
// Thread-safety: all methods are thread-safe.

#include <condition_variable>
#include <map>
#include <mutex>

#include "common/clock.h"

namespace lockstep::common {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000));

  absl::Time Now() const override;
  absl::Time Monotonic() const override;
  TimerId Schedule(absl::Time deadline, std::function<void()> fn) override;
  void Cancel(TimerId id) override;

  // Moves both time lines forward and runs every timer that is due.
  void Advance(absl::Duration d);
  // Blocks until at least `n` timers are pending (a sleeping thread holds one).
  void WaitForTimers(size_t n);
  // Blocks until a timer is due within `d` of now (a backoff sleep among long timers).
  void WaitForTimerWithin(absl::Duration d);
  size_t PendingTimers() const;
  // The earliest pending deadline, or InfiniteFuture.
  absl::Time NextDeadline() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  absl::Time wall_;
  absl::Time mono_;
  std::map<std::pair<absl::Time, TimerId>, std::function<void()>> timers_;
  TimerId next_id_ = 0;
};

}  // namespace lockstep::common
