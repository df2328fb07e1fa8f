#include "operator/trainingjob/progress_target.h"

#include <algorithm>

#include "common/str_util.h"
#include "operator/api/validation.h"

namespace lockstep::trainingjob {

bool IsPolled(const api::TrainingJob& job) {
  api::JobState s = job.status ? job.status->state : api::JobState::kPending;
  return s == api::JobState::kRunning || s == api::JobState::kRestarting;
}

namespace {
api::ReplicaType ProgressType(const api::TrainingJob& job) {
  return job.spec.replica_specs.contains(api::ReplicaType::kChief) ? api::ReplicaType::kChief
                                                                   : api::ReplicaType::kWorker;
}
}  // namespace

std::string ProgressPodName(const api::TrainingJob& job) {
  return api::ReplicaName(job.metadata.name, ProgressType(job), 0);
}

std::optional<ProgressTarget> ProgressTargetOf(const api::TrainingJob& job,
                                               const ObservedPod* pod) {
  if (pod == nullptr || !IsPolled(job) || pod->phase != PodPhase::kRunning || pod->pod_ip.empty() ||
      pod->metadata.deletion_timestamp || pod->metadata.name() != ProgressPodName(job)) {
    return std::nullopt;
  }
  if (pod->metadata.controller_uid() != job.metadata.uid) return std::nullopt;
  auto spec = job.spec.replica_specs.find(ProgressType(job));
  return ProgressTarget{.job_key = api::ObjectKey(job.metadata.namespace_, job.metadata.name),
                        .pod_uid = std::string(pod->metadata.uid()),
                        .pod_ip = pod->pod_ip,
                        .port = spec == job.spec.replica_specs.end()
                                    ? api::kDefaultMetricsPort
                                    : spec->second.pod_template.MetricsPort()};
}

}  // namespace lockstep::trainingjob
