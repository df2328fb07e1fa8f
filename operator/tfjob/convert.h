#pragma once
// Kubeflow TFJob manifests of every version brought to `kubeflow.org/v1` (as training-operator
// 1.9 reads it) or to a TrainingJob, each change said. What each version held, from
// tf-operator's and training-operator's API types and defaulting:
//   v1alpha1        spec.replicaSpecs: a list of {replicas, template, tfPort, tfReplicaType:
//                   MASTER|WORKER|PS (default MASTER)}; spec.terminationPolicy (the chief),
//                   tfImage (unused), RuntimeId (in pod names), schedulerName, and
//                   cleanupPodPolicy (empty: All);
//   v1alpha2/v1beta1  spec.tfReplicaSpecs (a map), spec.cleanPodPolicy (default Running),
//                   spec.ttlSecondsAfterFinished;
//   v1beta2, and v1 until 2020  also spec.activeDeadlineSeconds and spec.backoffLimit, all flat
//                   under spec;
//   v1              spec.runPolicy {cleanPodPolicy (default None since training-operator 1.6,
//                   Running before), ttlSecondsAfterFinished, activeDeadlineSeconds,
//                   backoffLimit, schedulingPolicy, suspend, managedBy}, successPolicy,
//                   enableDynamicWorker.
// Replica type keys match case-insensitively, as training-operator normalises them (worker ->
// Worker, MASTER -> Master, ps -> PS). A default of an older version that v1 changed is written
// out, so the job behaves as it did: cleanPodPolicy Running (All for v1alpha1). To a
// TrainingJob, Kubeflow's defaults where a TrainingJob's differ are written out too
// (restartPolicy Never, cleanPodPolicy None) and Master becomes Chief.
// Thread-safety: pure functions.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace lockstep::tfjob {

enum class Target { kTfJobV1, kTrainingJob };

struct Converted {
  nlohmann::json doc;
  std::vector<std::string> changes;  // what was changed, each a sentence naming the field
};

// A document of kind TFJob (any apiVersion).
bool IsTfJob(const nlohmann::json& doc);

// InvalidArgument naming the field when `doc` cannot be read as a TFJob (a replica spec that is
// not an object, a replica type no version knew, two keys for one type).
absl::StatusOr<Converted> Convert(const nlohmann::json& doc, Target to);

}  // namespace lockstep::tfjob
