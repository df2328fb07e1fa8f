#include "operator/trainingjob/progress_target.h"

#include <algorithm>

#include "common/str_util.h"
#include "operator/api/validation.h"

namespace lockstep::trainingjob {

bool IsPolled(api::JobState state) {
  return state == api::JobState::kRunning || state == api::JobState::kRestarting;
}

ProgressSpeaker ProgressSpeakerOf(const api::TrainingJob& job) {
  ProgressSpeaker s;
  auto spec = job.spec.replica_specs.find(api::ReplicaType::kChief);
  if (spec == job.spec.replica_specs.end()) {
    s.type = api::ReplicaType::kWorker;
    spec = job.spec.replica_specs.find(api::ReplicaType::kWorker);
  }
  if (spec != job.spec.replica_specs.end()) s.port = spec->second.pod_template.MetricsPort();
  s.master = job.tfjob && job.tfjob->master;
  return s;
}

std::string ProgressPodName(std::string_view job_name, const ProgressSpeaker& speaker) {
  if (speaker.master && speaker.type == api::ReplicaType::kChief) {
    return StrCat(job_name, "-master-0");
  }
  return api::ReplicaName(job_name, speaker.type, 0);
}

std::optional<ProgressTarget> ProgressTargetOf(const ChildMeta& job, api::JobState state,
                                               const ProgressSpeaker& speaker,
                                               const ObservedPod* pod) {
  if (pod == nullptr || !IsPolled(state) || pod->phase != PodPhase::kRunning ||
      pod->pod_ip.empty() || pod->metadata.deletion_timestamp ||
      pod->metadata.name() != ProgressPodName(job.name(), speaker)) {
    return std::nullopt;
  }
  if (pod->metadata.controller_uid() != job.uid()) return std::nullopt;
  return ProgressTarget{.job_key = std::string(job.key()),
                        .pod_uid = std::string(pod->metadata.uid()),
                        .pod_ip = pod->pod_ip,
                        .port = speaker.port};
}

}  // namespace lockstep::trainingjob
