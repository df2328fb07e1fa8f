#pragma once
// PodSimulator: the kubelet of `lockstep local serve --simulate-pods`, for scale tests, as kwok
// is for real clusters. It binds pending pods to its node and moves them through Pending ->
// Running -> Succeeded or Failed on a schedule, writing the status a kubelet would (phase,
// conditions, podIP, container states, restartCount), without starting any process: thousands
// of pods on one machine.
//
// The schedule: a bound pod runs after `start_delay`; a running pod ends after `run_time`
// (zero: runs until deleted) with exit code 0. Each of these default delays is scaled by a
// random factor in [1 - jitter, 1 + jitter]; an annotation's is exact. A pod's annotations override
// the schedule and inject failures, read again whenever the pod changes (so a running pod can be
// failed by annotating it):
//   lockstep.io/simulate-start-delay  duration, e.g. "2s": Pending for this long
//   lockstep.io/simulate-exit-after   duration: the container exits this long after it started
//   lockstep.io/simulate-exit-code    0-255, for any exit (default 1 when exit-after is set)
//   lockstep.io/simulate-reason       the terminated state's reason (default Completed for 0,
//                                     Error otherwise), e.g. OOMKilled
//   lockstep.io/simulate-message      the termination message
// A bad annotation value leaves a new pod Pending with the waiting reason SimulationError and
// a message that names the annotation; on a pod already running it is logged and ignored.
// restartPolicy is honoured as the runner honours it: Always and OnFailure restart the container
// after a crash-loop backoff (10 s doubling to 5 min), counting restartCount. A pod marked for
// deletion is removed at once (grace period 0). Thread-safety: Run() on one thread; the rest is
// internal.

#include <memory>
#include <stop_token>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/kube/rest_client.h"

namespace lockstep::local {

inline constexpr char kSimulateStartDelay[] = "lockstep.io/simulate-start-delay";
inline constexpr char kSimulateExitAfter[] = "lockstep.io/simulate-exit-after";
inline constexpr char kSimulateExitCode[] = "lockstep.io/simulate-exit-code";
inline constexpr char kSimulateReason[] = "lockstep.io/simulate-reason";
inline constexpr char kSimulateMessage[] = "lockstep.io/simulate-message";

struct PodSimulatorOptions {
  std::string node_name = "lockstep-local";
  absl::Duration start_delay = absl::Seconds(1);
  absl::Duration run_time = absl::ZeroDuration();  // zero: until deleted
  double jitter = 0.2;
  absl::Duration crash_backoff_initial = absl::Seconds(10);
  absl::Duration crash_backoff_max = absl::Minutes(5);
  uint64_t seed = 0;  // 0: random
};

class PodSimulator {
 public:
  // Pointers must outlive the simulator.
  PodSimulator(kube::RestClient* client, PodSimulatorOptions options, common::Clock* clock);
  ~PodSimulator();

  // Simulates pods until `stop`.
  void Run(std::stop_token stop);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::local
