#pragma once
// SilentWatch: a WatchSource that sends nothing and, unlike the API server's own (whose Next
// returns "" once a second), never returns from Next by itself: only Cancel ends it. A test
// that stops something reading it shows that the stop reaches the watch, rather than waiting
// for a wake-up. Should Cancel never come, Next gives up after `safety` so the test fails on
// cancelled() instead of hanging; nothing is timed.
// Thread-safety: thread-safe.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include "operator/local/apiserver/api_server.h"

namespace lockstep::local {

class SilentWatch final : public WatchSource {
 public:
  explicit SilentWatch(std::chrono::seconds safety = std::chrono::seconds(120)) : safety_(safety) {}

  std::optional<std::string> Next() override {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait_for(lock, safety_, [&] { return cancelled_; });
    --waiting_;
    return std::nullopt;
  }
  void Cancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

  // Waits until a Next is blocked in it (false when `timeout` passed first).
  bool AwaitReader(std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return waiting_ > 0 || cancelled_; });
  }
  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

 private:
  const std::chrono::seconds safety_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool cancelled_ = false;
};

}  // namespace lockstep::local
