#pragma once
// The collective watchdog: a thread that checks a backend's health every `interval` and, on the
// first failure, hands the status to `on_failure` once (which aborts the communicator), so an
// operation that errs asynchronously or stops making progress ends with an error instead of a
// hang. The NCCL backend checks ncclCommGetAsyncError and its DeadlineTracker.
// Thread-safety: thread-safe.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep::trainer::comm {

class Watchdog {
 public:
  Watchdog(absl::Duration interval, std::function<absl::Status()> check,
           std::function<void(absl::Status)> on_failure);
  ~Watchdog();  // stops the thread (without calling on_failure)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The status it fired with (nullopt while healthy).
  std::optional<absl::Status> fired() const;

 private:
  void Loop();

  const absl::Duration interval_;
  const std::function<absl::Status()> check_;
  const std::function<void(absl::Status)> on_failure_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<absl::Status> fired_;
  std::thread thread_;
};

// The operations in flight, oldest first, and when each was issued. Operations complete in
// issue order (one stream), so End retires the oldest. Check fails with DeadlineExceeded,
// naming the operation, once the oldest has been in flight longer than the timeout.
class DeadlineTracker {
 public:
  explicit DeadlineTracker(absl::Duration timeout) : timeout_(timeout) {}
  void Begin(std::string what, absl::Time now = absl::Now());
  void End();
  absl::Status Check(absl::Time now = absl::Now()) const;
  size_t in_flight() const;

 private:
  const absl::Duration timeout_;
  mutable std::mutex mu_;
  std::deque<std::pair<std::string, absl::Time>> pending_;
};

}  // namespace lockstep::trainer::comm
