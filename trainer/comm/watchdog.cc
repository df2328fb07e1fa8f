#include "trainer/comm/watchdog.h"

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::comm {

Watchdog::Watchdog(absl::Duration interval, std::function<absl::Status()> check,
                   std::function<void(absl::Status)> on_failure)
    : interval_(interval), check_(std::move(check)), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { Loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::optional<absl::Status> Watchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void Watchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, absl::ToChronoNanoseconds(interval_), [this] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    absl::Status s = check_();
    lock.lock();
    if (!s.ok()) {
      fired_ = s;
      lock.unlock();
      on_failure_(s);
      return;
    }
  }
}

void DeadlineTracker::Begin(std::string what, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.emplace_back(std::move(what), now);
}

void DeadlineTracker::End() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) pending_.pop_front();
}

size_t DeadlineTracker::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

absl::Status DeadlineTracker::Check(absl::Time now) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.empty() || now - pending_.front().second <= timeout_) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(pending_.front().first, " made no progress for ",
                                                  absl::FormatDuration(timeout_),
                                                  " (collective timeout)"));
}

}  // namespace lockstep::trainer::comm
