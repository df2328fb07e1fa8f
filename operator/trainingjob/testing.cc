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
  std::string name = api::ReplicaName(job.metadata.name, type, index);
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
  ContainerStatus c;
  c.name = "tensorflow";
  if (phase == PodPhase::kRunning) {
    c.state.kind = ContainerState::Kind::kRunning;
    c.ready = true;
    p.ready = true;
  } else if (phase == PodPhase::kSucceeded) {
    c.state.kind = ContainerState::Kind::kTerminated;
    c.state.reason = "Completed";
  } else {
    c.state.kind = ContainerState::Kind::kWaiting;
    c.state.reason = "ContainerCreating";
  }
  p.container_statuses.push_back(c);
  return p;
}

ObservedPod Exited(ObservedPod pod, int code, const std::string& termination_message) {
  pod.phase = PodPhase::kFailed;
  ContainerState& s = pod.container_statuses.at(0).state;
  s.kind = ContainerState::Kind::kTerminated;
  s.exit_code = code;
  s.reason = "Error";
  s.message = termination_message;
  pod.ready = false;
  return pod;
}

ObservedPod RestartedInPlace(ObservedPod pod, int code, int times) {
  ContainerStatus& c = pod.container_statuses.at(0);
  c.restart_count += times;
  c.last_state.kind = ContainerState::Kind::kTerminated;
  c.last_state.exit_code = code;
  c.last_state.reason = "Error";
  return pod;
}

std::shared_ptr<const ObservedPod> Share(ObservedPod p) {
  return std::make_shared<const ObservedPod>(std::move(p));
}

}  // namespace lockstep::trainingjob::testing
