#include "operator/trainingjob/observe.h"

namespace lockstep::trainingjob {
namespace {

kube::Resource PodGroups(GangScheduler gang) {
  GroupVersion gv = PodGroupVersion(gang);
  return {std::string(gv.group), std::string(gv.version), "podgroups", "PodGroup", true};
}

}  // namespace

ObservedPod ObservePod(const kube::Pod& pod) {
  ObservedPod out;
  out.metadata = pod.metadata;
  out.phase = ParsePodPhase(pod.phase);
  out.reason = pod.reason;
  out.message = pod.message;
  out.pod_ip = pod.pod_ip;
  out.conditions = pod.conditions;  // one type: api/pod_status.h
  out.container_statuses = pod.container_statuses;
  return out;
}

absl::StatusOr<ObservedPod> DecodeObservedPod(const nlohmann::json& j) {
  absl::StatusOr<kube::Pod> pod = kube::DecodePod(j);
  if (!pod.ok()) return pod.status();
  return ObservePod(*pod);
}

const kube::Resource& ResourceOf(ChildKind kind, GangScheduler gang) {
  static const kube::Resource kVolcano = PodGroups(GangScheduler::kVolcano);
  static const kube::Resource kPlugins = PodGroups(GangScheduler::kSchedulerPlugins);
  switch (kind) {
    case ChildKind::kPod:
      return kube::resources::kPods;
    case ChildKind::kService:
      return kube::resources::kServices;
    case ChildKind::kSecret:
      return kube::resources::kSecrets;
    case ChildKind::kPodGroup:
      return gang == GangScheduler::kVolcano ? kVolcano : kPlugins;
    case ChildKind::kTrainingJob:
      return kube::resources::kTrainingJobs;
  }
  return kube::resources::kTrainingJobs;
}

}  // namespace lockstep::trainingjob
