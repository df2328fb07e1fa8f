#include "trainer/config/tf_config.h"

#include <limits>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace lockstep::trainer {
namespace {

using nlohmann::json;

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(fmt::format("TF_CONFIG: {}: {}", field, why));
}

}  // namespace

const std::vector<std::string>& TfConfig::Hosts(std::string_view type) const {
  static const std::vector<std::string> kNone;
  auto it = cluster.find(std::string(type));
  return it == cluster.end() ? kNone : it->second;
}

const std::string& TfConfig::SelfAddress() const { return Hosts(task_type)[task_index]; }

absl::StatusOr<TfConfig> ParseTfConfig(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("<root>", "not valid JSON");
  if (!j.is_object()) return Bad("<root>", "must be a JSON object");
  TfConfig config;

  auto cluster = j.find("cluster");
  if (cluster == j.end() || !cluster->is_object()) {
    return Bad("cluster", "must be a non-empty object of task type -> address list");
  }
  for (const auto& [type, hosts] : cluster->items()) {
    if (hosts.is_object()) {
      return Bad(fmt::format("cluster.{}", type),
                 "is the sparse form (a TFJob's enableDynamicWorker), which names only this "
                 "task's own address; the trainer needs every member's: set "
                 "enableDynamicWorker false, or use a TrainingJob's runPolicy.elastic");
    }
    if (!hosts.is_array()) {
      return Bad(fmt::format("cluster.{}", type), "must be a list of \"host:port\"");
    }
    if (hosts.empty()) continue;  // a replica type of 0 replicas, as Kubeflow writes it
    // A TFJob's Master is TensorFlow 1's name for the chief.
    const std::string name = type == "master" ? "chief" : type;
    if (name == "chief" && config.cluster.contains("chief")) {
      return Bad("cluster.master", "a cluster has a chief or a master, not both");
    }
    for (size_t i = 0; i < hosts.size(); ++i) {
      const json& h = hosts[i];
      if (!h.is_string() || h.get_ref<const std::string&>().rfind(':') == std::string::npos) {
        return Bad(fmt::format("cluster.{}[{}]", type, i), "must be a \"host:port\" string");
      }
      config.cluster[name].push_back(h.get<std::string>());
    }
  }

  if (config.cluster.empty()) {
    return Bad("cluster", "must be a non-empty object of task type -> address list");
  }

  auto task = j.find("task");
  if (task == j.end() || !task->is_object()) return Bad("task", "must be an object");
  auto type = task->find("type");
  if (type == task->end() || !type->is_string()) return Bad("task.type", "must be a string");
  config.task_type = type->get<std::string>();
  if (config.task_type == "master") config.task_type = "chief";
  auto index = task->find("index");
  if (index == task->end() || !index->is_number_integer() || index->get<int64_t>() < 0 ||
      index->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    return Bad("task.index", "must be a non-negative integer");
  }
  config.task_index = static_cast<int32_t>(index->get<int64_t>());
  const std::vector<std::string>& peers = config.Hosts(config.task_type);
  if (peers.empty()) {
    return Bad("task.type", fmt::format("\"{}\" is not in cluster", config.task_type));
  }
  if (static_cast<size_t>(config.task_index) >= peers.size()) {
    return Bad("task.index", fmt::format("{} is out of range: cluster.{} has {} entries",
                                         config.task_index, config.task_type, peers.size()));
  }
  if (auto env = j.find("environment"); env != j.end()) {
    if (!env->is_string()) return Bad("environment", "must be a string");
    config.environment = env->get<std::string>();
  }
  return config;
}

}  // namespace lockstep::trainer
