#include "operator/trainingjob/observe.h"

#include "operator/trainingjob/labels.h"

namespace lockstep::trainingjob {
namespace {

kube::Resource PodGroups(GangScheduler gang) {
  GroupVersion gv = PodGroupVersion(gang);
  return {std::string(gv.group), std::string(gv.version), "podgroups", "PodGroup", true};
}

}  // namespace

void TrimChildMetadata(api::ObjectMeta& m) {
  std::erase_if(m.labels, [](const auto& label) {
    return label.first != kReplicaTypeLabel && label.first != kReplicaIndexLabel &&
           label.first != kAttemptLabel;
  });
  m.annotations.clear();
  m.finalizers.clear();
  m.generate_name.clear();
  m.other = nullptr;  // an empty object would cost an allocation per child
}

ObservedPod ObservePod(const kube::Pod& pod) {
  ObservedPod out;
  out.metadata = pod.metadata;
  TrimChildMetadata(out.metadata);
  out.phase = ParsePodPhase(pod.phase);
  out.reason = pod.reason;
  out.message = pod.message;
  out.pod_ip = pod.pod_ip;
  for (const api::PodCondition& c : pod.conditions) {  // one type: api/pod_status.h
    if (c.type == "Ready" || c.type == "PodScheduled" || c.type == "DisruptionTarget") {
      out.conditions.push_back(c);
    }
  }
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
