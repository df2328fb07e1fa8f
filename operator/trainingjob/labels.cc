#include "operator/trainingjob/labels.h"

#include <charconv>

#include "common/str_util.h"

namespace lockstep::trainingjob {

std::string TokenSecretName(std::string_view job_name) { return StrCat(job_name, "-token"); }

std::string ReplicaSelector(std::string_view job_name, api::ReplicaType type) {
  return StrCat(kJobNameLabel, "=", job_name, ",", kReplicaTypeLabel, "=",
                api::ReplicaTypeLower(type));
}

api::OwnerReference ControllerRef(const api::TrainingJob& job) {
  return {.api_version = job.api_version,
          .kind = job.kind,
          .name = job.metadata.name,
          .uid = job.metadata.uid,
          .controller = true,
          .block_owner_deletion = true};
}

std::optional<api::ReplicaType> ReplicaTypeLabel(const std::map<std::string, std::string>& labels) {
  auto it = labels.find(std::string(kReplicaTypeLabel));
  if (it == labels.end()) return std::nullopt;
  for (const auto& e : api::kReplicaTypeNames) {
    if (api::ReplicaTypeLower(e.value) == it->second) return e.value;
  }
  return std::nullopt;
}

int32_t LabelInt(const std::map<std::string, std::string>& labels, std::string_view key) {
  auto it = labels.find(std::string(key));
  if (it == labels.end() || it->second.empty()) return -1;
  int32_t v = -1;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || v < 0) return -1;
  return v;
}

}  // namespace lockstep::trainingjob
