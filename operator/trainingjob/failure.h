#pragma once
// Failure classification (DESIGN section 4): what a failed pod tells us, and what the operator
// does about it.
//
// Evidence comes from the pod: the last terminated run of its training container (exit code,
// reason, and the trainer's JSON termination message {"reason","retryable","message"}), the
// pod's own reason, and the DisruptionTarget condition. Disruptions (eviction, preemption,
// node loss, DisruptionTarget) are never counted against backoffLimit.
//
// Decision, in order:
//   1. the first failurePolicy rule that matches (replica type, exit code, reason); a rule
//      with no replicaTypes does not apply to the Evaluator, whose failures never fail the job;
//   2. otherwise the defaults: a disruption restarts at the default scope, uncounted; the
//      Evaluator restarts alone; a retryable failure restarts at the default scope; a
//      permanent one fails the job.
// Retryable: restartPolicy Always/OnFailure (the kubelet restarts in place); ExitCode: the
// termination message's "retryable" when present, else exit code >= 128; Never: never.
// Default scope: ParameterServer restarts a failed Worker alone and the group (every
// non-evaluator replica, new attempt) for a PS or Chief. MultiWorkerMirrored with in-place
// recovery (runPolicy.recovery, InPlace by default) restarts a failed pod alone, the survivors
// keeping their state; the chief's too (the coordination service it hosts moves to the lowest
// surviving rank, and its replacement joins there). Every other strategy restarts the group,
// because one lost rank breaks every collective.
// Thread-safety: pure functions.

#include <cstdint>
#include <optional>
#include <string>

#include "operator/api/trainingjob_types.h"
#include "operator/trainingjob/observed.h"

namespace lockstep::trainingjob {

struct PodFailure {
  std::string pod_name;
  std::string pod_uid;
  api::ReplicaType type = api::ReplicaType::kWorker;
  int32_t index = 0;
  std::optional<int32_t> exit_code;  // of the last terminated run, when known
  std::string reason;                // termination message's, else the container's or pod's
  std::string message;
  std::optional<bool> retryable;  // what the termination message said
  bool disruption = false;
  bool restarted_in_place = false;  // the kubelet already restarted the container
  int32_t new_failures = 1;         // failures not counted before
};

PodFailure DescribeFailure(const ObservedPod& pod, api::ReplicaType type, int32_t index);

// A pod's failures so far: container restarts plus one when the pod itself failed.
int32_t FailureCount(const ObservedPod& pod);

enum class Remedy { kFailJob, kRestartGroup, kRestartPod, kLeaveFailed };

struct FailureDecision {
  Remedy remedy = Remedy::kFailJob;
  bool counted = true;  // spends the job's backoffLimit
  std::string source;   // "failurePolicy.rules[2]" or "default", for messages
};

FailureDecision DecideFailure(const PodFailure& f, const api::TrainingJobSpec& spec);

// Condition reason naming the culprit: "WorkerExitedWithCode137", "PSEvicted", "ChiefFailed".
std::string FailureReason(const PodFailure& f);
// "Worker 1 (pod fmnist-worker-1) exited with code 137 (PeerLost: lost rank 0)".
std::string FailureMessage(const PodFailure& f);

}  // namespace lockstep::trainingjob
