#include "operator/runtime/backoff.h"

#include <algorithm>

namespace lockstep::runtime {

Backoff::Backoff(BackoffPolicy policy, uint64_t seed) : policy_(policy), rng_(seed) {}

absl::Duration Backoff::Next() {
  step_ = step_ == absl::ZeroDuration() ? policy_.initial
                                        : std::min(policy_.max, step_ * policy_.factor);
  if (policy_.jitter <= 0) return step_;
  std::uniform_real_distribution<double> extra(0.0, policy_.jitter);
  return step_ + step_ * extra(rng_);
}

}  // namespace lockstep::runtime
