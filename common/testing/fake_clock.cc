#include "common/testing/fake_clock.h"

#include <utility>

namespace lockstep::common {

FakeClock::FakeClock(absl::Time start) : wall_(start), mono_(absl::FromUnixSeconds(1000)) {}

absl::Time FakeClock::Now() const {
  std::lock_guard lock(mu_);
  return wall_;
}

absl::Time FakeClock::Monotonic() const {
  std::lock_guard lock(mu_);
  return mono_;
}

Clock::TimerId FakeClock::Schedule(absl::Time deadline, std::function<void()> fn) {
  TimerId id;
  {
    std::lock_guard lock(mu_);
    id = ++next_id_;
    if (deadline > mono_) {
      timers_.emplace(std::make_pair(deadline, id), std::move(fn));
      cv_.notify_all();
      return id;
    }
  }
  fn();  // already due
  return id;
}

void FakeClock::Cancel(TimerId id) {
  std::lock_guard lock(mu_);
  for (auto it = timers_.begin(); it != timers_.end(); ++it) {
    if (it->first.second == id) {
      timers_.erase(it);
      cv_.notify_all();
      return;
    }
  }
}

void FakeClock::Advance(absl::Duration d) {
  std::unique_lock lock(mu_);
  absl::Time target = mono_ + d;
  while (!timers_.empty() && timers_.begin()->first.first <= target) {
    auto first = timers_.begin();
    wall_ += first->first.first - mono_;
    mono_ = first->first.first;
    std::function<void()> fn = std::move(first->second);
    timers_.erase(first);
    lock.unlock();
    fn();
    lock.lock();
  }
  wall_ += target - mono_;
  mono_ = target;
  cv_.notify_all();
}

void FakeClock::WaitForTimers(size_t n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return timers_.size() >= n; });
}

void FakeClock::WaitForTimerWithin(absl::Duration d) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !timers_.empty() && timers_.begin()->first.first <= mono_ + d; });
}

size_t FakeClock::PendingTimers() const {
  std::lock_guard lock(mu_);
  return timers_.size();
}

absl::Time FakeClock::NextDeadline() const {
  std::lock_guard lock(mu_);
  return timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first;
}

}  // namespace lockstep::common
