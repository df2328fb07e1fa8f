#include "operator/trainingjob/testing.h"

#include <gtest/gtest.h>

#include "operator/api/trainingjob_json.h"
#include "operator/api/validation.h"
#include "operator/trainingjob/labels.h"

namespace lockstep::trainingjob::testing {

using nlohmann::json;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

json JobJson(const std::string& strategy, const std::vector<ReplicaDesc>& replicas,
             const json& extra_spec) {
  json j = json::object();
  j["apiVersion"] = "lockstep.io/v1alpha1";
  j["kind"] = "TrainingJob";
  j["metadata"]["name"] = "t";
  j["metadata"]["namespace"] = "ns";
  j["metadata"]["uid"] = "job-uid";
  j["metadata"]["generation"] = 1;
  if (!strategy.empty()) j["spec"]["strategy"] = strategy;
  for (const ReplicaDesc& r : replicas) {
    json container = json::object();
    container["name"] = "tensorflow";
    container["image"] = "lockstep/trainer:latest";
    json spec = json::object();
    spec["replicas"] = r.replicas;
    spec["restartPolicy"] = r.restart_policy;
    spec["template"]["spec"]["containers"] = json::array({container});
    j["spec"]["replicaSpecs"][r.type] = spec;
  }
  if (extra_spec.is_object()) j["spec"].merge_patch(extra_spec);
  return j;
}

api::TrainingJob Job(const std::string& strategy, const std::vector<ReplicaDesc>& replicas,
                     const json& extra_spec) {
  api::FieldErrors errors;
  api::TrainingJob job = api::DecodeTrainingJob(JobJson(strategy, replicas, extra_spec), &errors);
  EXPECT_TRUE(errors.empty()) << errors.front().ToString();
  return job;
}

ObservedPod MakePod(const api::TrainingJob& job, api::ReplicaType type, int index, int attempt,
                    PodPhase phase) {
  ObservedPod p;
  std::string name = api::ReplicaName(job, type, index);
  p.metadata.Set({.namespace_ = job.metadata.namespace_,
                  .name = name,
                  .uid = name + "-a" + std::to_string(attempt),
                  .resource_version = "1",
                  .controller_uid = job.metadata.uid,
                  .controller_job = job.metadata.name});
  p.metadata.creation_timestamp = kT0;
  p.metadata.replica_type = type;
  p.metadata.replica_index = index;
  p.metadata.attempt = attempt;
  p.phase = phase;
  p.pod_ip = "127.0.1." + std::to_string(index + 1);
  // One container: running, terminated as Completed, or waiting as ContainerCreating.
  if (phase == PodPhase::kRunning) {
    p.ready = true;
  } else {
    p.containers_running = false;
    if (phase != PodPhase::kSucceeded) {
      p.mutable_detail().waiting = {.kind = ContainerState::Kind::kWaiting,
                                    .reason = "ContainerCreating"};
    }
  }
  return p;
}

ObservedPod Exited(ObservedPod pod, int code, const std::string& termination_message) {
  pod.phase = PodPhase::kFailed;
  pod.ready = false;
  pod.containers_running = false;
  PodDetail& why = pod.mutable_detail();
  why.waiting = {};
  // The container's state is the one that failed, unless it exited 0 and never restarted.
  why.failure.reset();
  if (code != 0 || pod.restarts > 0) {
    why.failure = ContainerState{.kind = ContainerState::Kind::kTerminated,
                                 .reason = "Error",
                                 .message = termination_message,
                                 .exit_code = code};
  }
  return pod;
}

ObservedPod RestartedInPlace(ObservedPod pod, int code, int times) {
  pod.restarts += times;
  PodDetail& why = pod.mutable_detail();
  // A container that has terminated with a nonzero code still speaks for the pod.
  bool terminated = pod.phase == PodPhase::kFailed && why.failure && why.failure->exit_code != 0;
  if (!terminated) {
    why.failure = ContainerState{
        .kind = ContainerState::Kind::kTerminated, .reason = "Error", .exit_code = code};
  }
  return pod;
}

ObservedPod WithUid(ObservedPod pod, std::string_view uid) {
  ChildMeta::Strings s = pod.metadata.strings();
  s.uid = uid;
  pod.metadata.Set(s);
  return pod;
}

std::shared_ptr<const ObservedPod> Share(ObservedPod p) {
  return std::make_shared<const ObservedPod>(std::move(p));
}

}  // namespace lockstep::trainingjob::testing
