#pragma once
// Exponential backoff: initial, doubling up to max, with optional jitter (a random extra of up
// to `jitter` times the step, so a fleet of clients does not retry in lockstep).
// Thread-safety: not thread-safe; one per retry loop.

#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace lockstep::runtime {

struct BackoffPolicy {
  absl::Duration initial = absl::Milliseconds(800);
  absl::Duration max = absl::Seconds(30);
  double factor = 2.0;
  double jitter = 0.0;  // 0 = exact steps
};

class Backoff {
 public:
  explicit Backoff(BackoffPolicy policy = {}, uint64_t seed = 1);
  // The next wait; each call grows the step.
  absl::Duration Next();
  void Reset() { step_ = absl::ZeroDuration(); }

 private:
  BackoffPolicy policy_;
  std::mt19937_64 rng_;
  absl::Duration step_ = absl::ZeroDuration();
};

}  // namespace lockstep::runtime
