#include "operator/trainingjob/tf_config.h"

#include <nlohmann/json.hpp>

#include "common/str_util.h"
#include "operator/api/validation.h"

namespace lockstep::trainingjob {

const api::Container* TrainingContainerOf(const api::TrainingJob& job, api::ReplicaType type) {
  auto it = job.spec.replica_specs.find(type);
  if (it == job.spec.replica_specs.end()) return nullptr;
  if (!job.tfjob) return it->second.pod_template.TrainingContainer();
  for (const api::Container& c : it->second.pod_template.containers()) {
    if (c.name == "tensorflow") return &c;
  }
  return nullptr;
}

int32_t TrainingPortOf(const api::TrainingJob& job, api::ReplicaType type) {
  if (!job.tfjob) {
    auto it = job.spec.replica_specs.find(type);
    return it == job.spec.replica_specs.end() ? api::kDefaultTrainingPort
                                              : it->second.pod_template.TrainingPort();
  }
  const api::Container* c = TrainingContainerOf(job, type);
  const api::ContainerPort* p = c ? c->FindPort(api::kKubeflowPortName) : nullptr;
  return p ? p->container_port : api::kDefaultTrainingPort;
}

std::string ReplicaHost(const api::TrainingJob& job, api::ReplicaType type, int32_t index,
                        std::string_view cluster_domain) {
  const int32_t port = TrainingPortOf(job, type);
  std::string host =
      StrCat(api::ReplicaName(job, type, index), ".", job.metadata.namespace_, ".svc");
  if (!cluster_domain.empty()) host = StrCat(host, ".", cluster_domain);
  return StrCat(host, ":", port);
}

namespace {

// A served TFJob's, as training-operator 1.9 writes it (genTFConfigJSONStr): every replica type
// in the cluster, one with 0 replicas as an empty list; with enableDynamicWorker the sparse
// form, whose cluster holds this task's own worker address (by index) and the PS list, and
// which has no "environment".
std::string TfJobConfig(const api::TrainingJob& job, api::ReplicaType type, int32_t index,
                        std::string_view domain) {
  nlohmann::json cluster = nlohmann::json::object();
  for (const auto& [t, spec] : job.spec.replica_specs) {
    nlohmann::json hosts = nlohmann::json::array();
    for (int32_t i = 0; i < spec.replicas; ++i) hosts.push_back(ReplicaHost(job, t, i, domain));
    cluster[std::string(api::ReplicaTypeLower(job, t))] = std::move(hosts);
  }
  nlohmann::json type_name = std::string(api::ReplicaTypeLower(job, type));
  const std::string task =
      StrCat(R"("task":{"type":)", type_name.dump(), R"(,"index":)", index, "}");
  if (!job.tfjob->dynamic_worker) {
    return StrCat(R"({"cluster":)", cluster.dump(), ",", task, R"(,"environment":"cloud"})");
  }
  // Go writes the struct's fields in order (worker, then ps), a nil PS list as null.
  nlohmann::json worker = nlohmann::json::object();
  nlohmann::json ps = nlohmann::json::array();
  if (type == api::ReplicaType::kPS) {
    ps.push_back(cluster["ps"][index]);
  } else if (type == api::ReplicaType::kWorker) {
    ps = cluster.contains("ps") ? cluster["ps"] : nlohmann::json(nullptr);
    worker[std::to_string(index)] = cluster["worker"][index];
  }
  return StrCat(R"({"cluster":{"worker":)", worker.dump(), R"(,"ps":)", ps.dump(), "},", task, "}");
}

}  // namespace

std::optional<std::string> BuildTfConfig(const api::TrainingJob& job, api::ReplicaType type,
                                         int32_t index, std::string_view default_cluster_domain) {
  int32_t total = 0;
  for (const auto& [t, spec] : job.spec.replica_specs) total += spec.replicas;
  if (total == 1) return std::nullopt;
  std::string_view domain = job.spec.tf_config.cluster_domain.empty()
                                ? default_cluster_domain
                                : std::string_view(job.spec.tf_config.cluster_domain);
  if (job.tfjob) return TfJobConfig(job, type, index, domain);
  // nlohmann::json objects keep keys sorted, which is the cluster's order; the top level is
  // written by hand because its order (cluster, task, environment) is not alphabetical.
  nlohmann::json cluster = nlohmann::json::object();
  for (const auto& [t, spec] : job.spec.replica_specs) {
    if (t == api::ReplicaType::kEvaluator && !job.spec.tf_config.include_evaluator) continue;
    if (spec.replicas == 0) continue;
    nlohmann::json hosts = nlohmann::json::array();
    for (int32_t i = 0; i < spec.replicas; ++i) hosts.push_back(ReplicaHost(job, t, i, domain));
    cluster[std::string(api::ReplicaTypeLower(t))] = std::move(hosts);
  }
  nlohmann::json type_name = std::string(api::ReplicaTypeLower(type));
  return StrCat(R"({"cluster":)", cluster.dump(), R"(,"task":{"type":)", type_name.dump(),
                R"(,"index":)", index, R"(},"environment":"cloud"})");
}

}  // namespace lockstep::trainingjob
