#pragma once
// TF_CONFIG as the operator injects it, byte-for-byte the Kubeflow TFJob v1 form (DESIGN
// section 3): compact JSON with the top-level keys in the order cluster, task, environment;
// cluster keys sorted; hosts "<job>-<type>-<i>.<ns>.svc[.<domain>]:<port>"; the evaluator in
// the cluster unless tfConfig.includeEvaluator is false; nothing for a single-replica job.
// A served TFJob's is training-operator's own, byte for byte (its Master as "master", types of
// 0 replicas as empty lists, enableDynamicWorker's sparse form).
// Thread-safety: pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "operator/api/trainingjob_types.h"

namespace lockstep::trainingjob {

// `default_cluster_domain` (the operator's --cluster-domain) applies when the job's
// tfConfig.clusterDomain is empty. nullopt when the job has exactly one replica in all.
std::optional<std::string> BuildTfConfig(const api::TrainingJob& job, api::ReplicaType type,
                                         int32_t index,
                                         std::string_view default_cluster_domain = "");

// The container given TF_CONFIG: a TFJob's is the one named "tensorflow" (as training-operator's
// SetClusterSpec), a TrainingJob's the template's TrainingContainer. Null without one.
const api::Container* TrainingContainerOf(const api::TrainingJob& job, api::ReplicaType type);
// Its training port: a TFJob's "tfjob-port" (GetPortFromTFJob), a TrainingJob's "lockstep" or
// "tfjob-port"; else 2222.
int32_t TrainingPortOf(const api::TrainingJob& job, api::ReplicaType type);

// "<name>.<ns>.svc[.<domain>]:<port>"
std::string ReplicaHost(const api::TrainingJob& job, api::ReplicaType type, int32_t index,
                        std::string_view cluster_domain);

}  // namespace lockstep::trainingjob
