#include "common/clock.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/time/clock.h"

namespace lockstep::common {

bool Clock::SleepUntil(absl::Time deadline, std::stop_token stop) {
  struct Wake {
    std::mutex mu;
    std::condition_variable_any cv;
    bool fired = false;
  };
  auto wake = std::make_shared<Wake>();
  TimerId id = Schedule(deadline, [wake] {
    std::lock_guard lock(wake->mu);
    wake->fired = true;
    wake->cv.notify_all();
  });
  std::unique_lock lock(wake->mu);
  wake->cv.wait(lock, stop, [&] { return wake->fired; });
  if (wake->fired) return true;
  lock.unlock();
  Cancel(id);
  return false;
}

namespace {

absl::Time SteadyNow() {
  return absl::FromUnixNanos(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
}

std::chrono::steady_clock::time_point ToSteady(absl::Time t) {
  return std::chrono::steady_clock::time_point(
      std::chrono::nanoseconds(absl::ToInt64Nanoseconds(t - absl::UnixEpoch())));
}

// Timers are kept in deadline order and run by one thread, which sleeps until the earliest.
class RealClock final : public Clock {
 public:
  RealClock() : thread_([this](std::stop_token stop) { Loop(stop); }) {}
  ~RealClock() override {
    thread_.request_stop();
    thread_.join();
  }

  absl::Time Now() const override { return absl::Now(); }
  absl::Time Monotonic() const override { return SteadyNow(); }

  TimerId Schedule(absl::Time deadline, std::function<void()> fn) override {
    std::lock_guard lock(mu_);
    TimerId id = ++next_id_;
    timers_.emplace(std::make_pair(deadline, id), std::move(fn));
    cv_.notify_all();
    return id;
  }

  void Cancel(TimerId id) override {
    std::lock_guard lock(mu_);
    for (auto it = timers_.begin(); it != timers_.end(); ++it) {
      if (it->first.second == id) {
        timers_.erase(it);
        return;
      }
    }
  }

 private:
  void Loop(std::stop_token stop) {
    std::unique_lock lock(mu_);
    while (!stop.stop_requested()) {
      if (timers_.empty()) {
        cv_.wait(lock, stop, [&] { return !timers_.empty(); });
        continue;
      }
      auto first = timers_.begin();
      if (first->first.first > SteadyNow()) {
        absl::Time deadline = first->first.first;
        cv_.wait_until(lock, stop, ToSteady(deadline),
                       [&] { return !timers_.empty() && timers_.begin()->first.first < deadline; });
        continue;
      }
      std::function<void()> fn = std::move(first->second);
      timers_.erase(first);
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::pair<absl::Time, TimerId>, std::function<void()>> timers_;
  TimerId next_id_ = 0;
  std::jthread thread_;  // last: starts after the members it uses exist
};

}  // namespace

std::unique_ptr<Clock> NewRealClock() { return std::make_unique<RealClock>(); }

Clock& SystemClock() {
  static Clock* const clock = NewRealClock().release();
  return *clock;
}

}  // namespace lockstep::common
