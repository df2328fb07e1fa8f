#include "operator/trainingjob/observe.h"

namespace lockstep::trainingjob {
namespace {

ContainerState ObserveState(const kube::ContainerState& s) {
  ContainerState out;
  switch (s.kind) {
    case kube::ContainerState::Kind::kUnknown:
      out.kind = ContainerState::Kind::kUnknown;
      break;
    case kube::ContainerState::Kind::kWaiting:
      out.kind = ContainerState::Kind::kWaiting;
      break;
    case kube::ContainerState::Kind::kRunning:
      out.kind = ContainerState::Kind::kRunning;
      break;
    case kube::ContainerState::Kind::kTerminated:
      out.kind = ContainerState::Kind::kTerminated;
      break;
  }
  out.reason = s.reason;
  out.message = s.message;
  out.exit_code = s.exit_code;
  return out;
}

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
  for (const kube::PodCondition& c : pod.conditions) {
    out.conditions.push_back({c.type, c.status, c.reason, c.message});
  }
  for (const kube::ContainerStatus& c : pod.container_statuses) {
    out.container_statuses.push_back(
        {c.name, c.ready, c.restart_count, ObserveState(c.state), ObserveState(c.last_state)});
  }
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
