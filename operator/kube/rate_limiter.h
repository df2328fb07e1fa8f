#pragma once
// Client-side request throttling: a token bucket that refills at `qps` up to `burst` tokens,
// as client-go's --kube-api-qps/--kube-api-burst. Reserve() hands out tokens in arrival order
// and may go into debt, so waiting callers are served first come, first served.
// Thread-safety: thread-safe.

#include <mutex>
#include <stop_token>

#include "absl/time/time.h"
#include "common/clock.h"

namespace lockstep::kube {

class TokenBucket {
 public:
  // qps <= 0 disables throttling. `clock` must outlive the bucket.
  TokenBucket(double qps, int burst, common::Clock* clock);

  // Takes a token and returns how long to wait before using it (zero when one was ready).
  absl::Duration Reserve();
  // Takes a token only when one is ready now.
  bool TryAccept();
  // Reserve() and sleep; false when `stop` was requested first (the token is spent anyway).
  bool Wait(std::stop_token stop = {});

  // The time the calling thread has spent in Wait(), in any bucket, since it started: a
  // reconcile reports its throttling apart from its own work by the difference.
  static absl::Duration WaitedOnThisThread();

 private:
  void Refill();

  const double qps_;
  const double burst_;
  common::Clock* clock_;
  std::mutex mu_;
  double tokens_;
  absl::Time last_;
};

}  // namespace lockstep::kube
