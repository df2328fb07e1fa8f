#pragma once
// Clock: the one source of time for the operator runtime and the trainer's group membership,
// so that backoff, leases, timers, token refresh, heartbeats, peer timeouts and rejoin
// deadlines are tested with FakeClock (testing/fake_clock.h) instead of sleeps.
//
// Two time lines: Now() is wall time, used only for timestamps written to the API (event
// times, lease renewTime). Monotonic() never jumps and has an arbitrary epoch; every duration
// and deadline the runtime computes uses it. Timers run their callbacks on a thread owned by
// the clock (RealClock) or inside FakeClock::Advance; a callback must not block.
// Thread-safety: all methods are thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>

#include "absl/time/time.h"

namespace lockstep::common {

class Clock {
 public:
  using TimerId = uint64_t;

  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;
  virtual absl::Time Monotonic() const = 0;

  // Runs `fn` once Monotonic() reaches `deadline` (at once, from the timer thread, when it
  // already has). Cancel() before it ran prevents it; cancelling a finished timer is a no-op.
  virtual TimerId Schedule(absl::Time deadline, std::function<void()> fn) = 0;
  virtual void Cancel(TimerId id) = 0;

  // Blocks until Monotonic() reaches `deadline` or `stop` is requested. False when stopped.
  bool SleepUntil(absl::Time deadline, std::stop_token stop = {});
  bool SleepFor(absl::Duration d, std::stop_token stop = {}) {
    return SleepUntil(Monotonic() + d, std::move(stop));
  }
};

// The process clock: system_clock for Now(), steady_clock for Monotonic(), one timer thread.
std::unique_ptr<Clock> NewRealClock();
// One process clock shared by the components not handed one (made on first use, never
// destroyed: threads may read it until the process exits).
Clock& SystemClock();

}  // namespace lockstep::common
