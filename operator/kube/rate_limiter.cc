#include "operator/kube/rate_limiter.h"

#include <algorithm>

namespace lockstep::kube {
namespace {

thread_local absl::Duration waited_on_this_thread;

}  // namespace

TokenBucket::TokenBucket(double qps, int burst, common::Clock* clock)
    : qps_(qps),
      burst_(std::max(1, burst)),
      clock_(clock),
      tokens_(burst_),
      last_(clock->Monotonic()) {}

void TokenBucket::Refill() {
  absl::Time now = clock_->Monotonic();
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
}

absl::Duration TokenBucket::Reserve() {
  if (qps_ <= 0) return absl::ZeroDuration();
  std::lock_guard lock(mu_);
  Refill();
  tokens_ -= 1;
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

bool TokenBucket::TryAccept() {
  if (qps_ <= 0) return true;
  std::lock_guard lock(mu_);
  Refill();
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

bool TokenBucket::Wait(std::stop_token stop) {
  absl::Duration d = Reserve();
  if (d <= absl::ZeroDuration()) return !stop.stop_requested();
  const absl::Time start = clock_->Monotonic();
  const bool slept = clock_->SleepFor(d, std::move(stop));
  waited_on_this_thread += clock_->Monotonic() - start;
  return slept;
}

absl::Duration TokenBucket::WaitedOnThisThread() { return waited_on_this_thread; }

}  // namespace lockstep::kube
