#include "operator/trainingjob/observe.h"

#include <nlohmann/json.hpp>

#include "operator/api/trainingjob_json.h"
#include "operator/trainingjob/labels.h"
#include "operator/trainingjob/progress.h"

namespace lockstep::trainingjob {
namespace {

kube::Resource PodGroups(GangScheduler gang) {
  GroupVersion gv = PodGroupVersion(gang);
  return {std::string(gv.group), std::string(gv.version), "podgroups", "PodGroup", true};
}

}  // namespace

ChildMeta ObserveChildMeta(const api::ObjectMeta& m) {
  ChildMeta::Strings strings{.namespace_ = m.namespace_,
                             .name = m.name,
                             .uid = m.uid,
                             .resource_version = m.resource_version};
  for (const api::OwnerReference& r : m.owner_references) {
    if (!r.controller.value_or(false)) continue;
    strings.controller_uid = r.uid;
    if ((r.kind == api::kKind && r.api_version == api::kApiVersion) ||
        (r.kind == api::kTfJobKind && r.api_version == api::kTfJobApiVersion)) {
      strings.controller_job = r.name;
    }
    break;
  }
  ChildMeta c(strings);
  c.creation_timestamp = m.creation_timestamp;
  c.deletion_timestamp = m.deletion_timestamp;
  c.replica_type = ReplicaTypeLabel(m.labels);
  c.replica_index = LabelInt(m.labels, kReplicaIndexLabel);
  c.attempt = LabelInt(m.labels, kAttemptLabel);
  c.incarnation = std::max(0, LabelInt(m.labels, kIncarnationLabel));
  return c;
}

namespace {

// The state PodDetail::failure keeps (observed.h): null when no container failed.
const ContainerState* FailedContainer(const std::vector<api::ContainerStatus>& containers) {
  const api::ContainerStatus* best = nullptr;
  for (const api::ContainerStatus& c : containers) {
    bool terminated = c.state.kind == ContainerState::Kind::kTerminated && c.state.exit_code != 0;
    bool restarted = c.restart_count > 0 && c.last_state.kind == ContainerState::Kind::kTerminated;
    if (terminated || restarted) {
      if (best == nullptr || c.restart_count > best->restart_count || terminated) best = &c;
    }
  }
  if (best == nullptr) return nullptr;
  return best->state.kind == ContainerState::Kind::kTerminated ? &best->state : &best->last_state;
}

// The final progress and evaluation a trainer that exited 0 left in its termination message;
// a message that is not such JSON (another program's) is left alone.
void ReadFinalFigures(const std::vector<api::ContainerStatus>& containers, ObservedPod& out) {
  for (const api::ContainerStatus& c : containers) {
    if (c.state.kind != ContainerState::Kind::kTerminated || c.state.exit_code != 0) continue;
    nlohmann::json msg = nlohmann::json::parse(c.state.message, nullptr, false);
    if (!msg.is_object()) continue;
    if (auto p = msg.find("progress"); p != msg.end() && p->is_object()) {
      absl::StatusOr<api::Progress> progress = ParseProgress(p->dump());  // as /progress is read
      if (progress.ok()) out.mutable_detail().final_progress = std::move(*progress);
    }
    if (auto e = msg.find("evaluation"); e != msg.end() && e->is_object()) {
      api::FieldErrors errors;
      api::Evaluation eval = api::DecodeEvaluation(*e, api::FieldPath("evaluation"), &errors,
                                                   {.reject_unknown_fields = false});
      if (errors.empty()) out.mutable_detail().final_evaluation = std::move(eval);
    }
    return;
  }
}

}  // namespace

ObservedPod ObservePod(const kube::Pod& pod) {
  ObservedPod out;
  out.metadata = ObserveChildMeta(pod.metadata);
  out.phase = ParsePodPhase(pod.phase);
  out.pod_ip = pod.pod_ip;
  out.gated = !pod.scheduling_gates.empty();
  for (size_t i = 0; i < pod.metadata.finalizers.size(); ++i) {
    if (pod.metadata.finalizers[i] == kKueueFinalizer)
      out.kueue_finalizer = static_cast<int32_t>(i);
  }
  auto retriable = pod.metadata.annotations.find(std::string(kKueueRetriableAnnotation));
  out.kueue_group_done =
      retriable != pod.metadata.annotations.end() && retriable->second == "false";
  if (!pod.reason.empty()) out.mutable_detail().reason = pod.reason;
  if (!pod.message.empty()) out.mutable_detail().message = pod.message;
  for (const api::PodCondition& c : pod.conditions) {
    if (c.type == "Ready") out.ready = c.status == "True";
    // Kueue's preemption says TerminationTarget (WorkloadEvictedDueToPreempted).
    if ((c.type == "DisruptionTarget" || c.type == "TerminationTarget") && c.status == "True") {
      out.disruption_target = true;
      if (!c.reason.empty()) out.mutable_detail().disruption_reason = c.reason;
      if (!c.message.empty()) out.mutable_detail().disruption_message = c.message;
    }
    if (c.type == "PodScheduled" && c.status == "False") {
      out.unschedulable = true;
      if (!c.message.empty()) out.mutable_detail().unschedulable_message = c.message;
    }
  }
  for (const api::ContainerStatus& c : pod.container_statuses) {
    out.containers_running =
        out.containers_running && c.state.kind == ContainerState::Kind::kRunning;
    out.restarts += c.restart_count;
    if (c.state.kind == ContainerState::Kind::kWaiting && !c.state.reason.empty() &&
        out.why().waiting.reason.empty()) {
      out.mutable_detail().waiting = c.state;  // the first one
    }
  }
  if (const ContainerState* failed = FailedContainer(pod.container_statuses)) {
    out.mutable_detail().failure = *failed;
  }
  if (out.phase == PodPhase::kSucceeded) ReadFinalFigures(pod.container_statuses, out);
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
