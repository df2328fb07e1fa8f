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

// A transition rule (an update's old spec is `oldSelf`): replica counts do not change, except an
// elastic job's Worker count and any count of a job suspended before and after.
inline constexpr std::string_view kFixedReplicasRule =
    "(has(self.runPolicy) && has(self.runPolicy.suspend) && self.runPolicy.suspend && has(oldSe"
    "lf.runPolicy) && has(oldSelf.runPolicy.suspend) && oldSelf.runPolicy.suspend) || ((!has(se"
    "lf.replicaSpecs.Chief) || !has(oldSelf.replicaSpecs.Chief) || self.replicaSpecs.Chief.repl"
    "icas == oldSelf.replicaSpecs.Chief.replicas) && (!has(self.replicaSpecs.PS) || !has(oldSel"
    "f.replicaSpecs.PS) || self.replicaSpecs.PS.replicas == oldSelf.replicaSpecs.PS.replicas) &"
    "& (!has(self.replicaSpecs.Evaluator) || !has(oldSelf.replicaSpecs.Evaluator) || self.repli"
    "caSpecs.Evaluator.replicas == oldSelf.replicaSpecs.Evaluator.replicas) && ((has(self.runPo"
    "licy) && has(self.runPolicy.elastic)) || !has(self.replicaSpecs.Worker) || !has(oldSelf.re"
    "plicaSpecs.Worker) || self.replicaSpecs.Worker.replicas == oldSelf.replicaSpecs.Worker.rep"
    "licas))";
inline constexpr std::string_view kFixedReplicasMessage =
    "replica counts are fixed while the job runs: set runPolicy.elastic to scale its Workers, or "
    "suspend the job first";

// Whether `self` satisfies `rule`; nullopt when the rule has no native counterpart. A
// transition rule (one naming oldSelf) is evaluated only on an update (`old` set), as an API
// server does; on a create it holds.
std::optional<bool> EvaluateKnownRule(std::string_view rule, const nlohmann::json& self,
                                      const nlohmann::json* old = nullptr);

}  // namespace lockstep::api
