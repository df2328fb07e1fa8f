#pragma once
// Builders for the controller's tests: jobs from a compact description, pods in any phase
// with the labels and owner reference the operator gives them. Test-only
// (lockstep_planner_testing). Thread-safety: plain functions.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/trainingjob_types.h"
#include "operator/trainingjob/observed.h"

namespace lockstep::trainingjob::testing {

struct ReplicaDesc {
  std::string type;  // "Chief", "Worker", "PS", "Evaluator"
  int replicas = 1;
  std::string restart_policy = "OnFailure";
};

// A TrainingJob "t" in namespace "ns" with uid "job-uid"; `extra_spec` is merged into spec.
nlohmann::json JobJson(const std::string& strategy, const std::vector<ReplicaDesc>& replicas,
                       const nlohmann::json& extra_spec = nlohmann::json::object());
api::TrainingJob Job(const std::string& strategy, const std::vector<ReplicaDesc>& replicas,
                     const nlohmann::json& extra_spec = nlohmann::json::object());

extern const absl::Time kT0;  // creation time of every test pod

// A pod of the job in `phase`; uid "<name>-a<attempt>". Running and Succeeded pods have a
// running or exited-0 container.
ObservedPod MakePod(const api::TrainingJob& job, api::ReplicaType type, int index, int attempt,
                    PodPhase phase);
// The container exited with `code` and the pod failed (restartPolicy Never).
ObservedPod Exited(ObservedPod pod, int code, const std::string& termination_message = "");
// The kubelet restarted the container in place `times` times, the last run exiting `code`.
ObservedPod RestartedInPlace(ObservedPod pod, int code, int times = 1);

// The same pod under another UID: a pod recreated under its name.
ObservedPod WithUid(ObservedPod pod, std::string_view uid);

std::shared_ptr<const ObservedPod> Share(ObservedPod p);

}  // namespace lockstep::trainingjob::testing
