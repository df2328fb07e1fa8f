#pragma once
// The CEL validation rules (x-kubernetes-validations) of the CRDs this project ships, each by a
// native counterpart of its exact text: lockstep local has no CEL interpreter, and evaluates a
// rule it knows this way (crd_schema.h); a rule it does not know is skipped, as an API server
// older than 1.25 skips them all. crd_test.cc checks that every rule of the TrainingJob CRD has
// its counterpart here.
// Thread-safety: pure functions.

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lockstep::api {

// The TrainingJob spec's elastic bounds: the Worker count lies within runPolicy.elastic.
inline constexpr std::string_view kElasticBoundsRule =
    "!has(self.runPolicy) || !has(self.runPolicy.elastic) || !has(self.replicaSpecs.Worker) || "
    "(self.replicaSpecs.Worker.replicas >= self.runPolicy.elastic.minReplicas && "
    "self.replicaSpecs.Worker.replicas <= self.runPolicy.elastic.maxReplicas)";

// Whether `self` satisfies `rule`; nullopt when the rule has no native counterpart.
std::optional<bool> EvaluateKnownRule(std::string_view rule, const nlohmann::json& self);

}  // namespace lockstep::api
