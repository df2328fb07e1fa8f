#pragma once
// Which pod speaks for a job's progress (DESIGN section 3: the chief, else worker 0, on its
// port named lockstep-metrics) and when it is asked: while the job is Running or Restarting.
// The progress poller polls these targets; the reconciler reads progress only for such jobs.
// Thread-safety: plain values and pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "operator/api/trainingjob_types.h"
#include "operator/trainingjob/observed.h"

namespace lockstep::trainingjob {

struct ProgressTarget {
  std::string job_key;  // "ns/name" of the TrainingJob
  std::string pod_uid;  // a replaced pod is a new target: it is polled at once
  std::string pod_ip;
  int32_t port = api::kDefaultMetricsPort;
};

// Whether a job's progress is read: it is Running or Restarting (its chief may be training).
bool IsPolled(api::JobState state);

// What the poller reads of a job, taken from it once: the job cache keeps it beside the job's
// JSON (reconciler.h), so a polling round decodes no job.
struct ProgressSpeaker {
  api::ReplicaType type = api::ReplicaType::kChief;  // the chief, else worker 0
  int32_t port = api::kDefaultMetricsPort;           // its container's lockstep-metrics port
  bool master = false;  // a TFJob's chief keyed Master: its pod is "<job>-master-0"
};
ProgressSpeaker ProgressSpeakerOf(const api::TrainingJob& job);
// The pod whose /progress speaks for the job: "<job>-chief-0" ("<job>-master-0"), else
// "<job>-worker-0".
std::string ProgressPodName(std::string_view job_name, const ProgressSpeaker& speaker);
// The target for the job with metadata `job` in `state`, given its pod named ProgressPodName
// (null when absent): none unless the job is polled and the pod is controlled by the job,
// Running and has an IP.
std::optional<ProgressTarget> ProgressTargetOf(const ChildMeta& job, api::JobState state,
                                               const ProgressSpeaker& speaker,
                                               const ObservedPod* pod);

}  // namespace lockstep::trainingjob
