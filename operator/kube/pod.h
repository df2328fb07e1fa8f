#pragma once
// Pod: the part of a core/v1 Pod that the operator reads, decoded from the API's JSON.
// Caches hold this projection rather than the whole object (the spec's containers, volumes
// and managedFields are dropped), which keeps an informer's memory below the JSON's size.
// Thread-safety: plain values.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/api/object_meta.h"
#include "operator/api/pod_status.h"

namespace lockstep::kube {

using api::ContainerState;
using api::ContainerStatus;
using api::PodCondition;

struct Pod {
  api::ObjectMeta metadata;  // without `other` (managedFields and the like)
  std::string node_name;
  std::string restart_policy;
  std::string hostname;
  std::string subdomain;
  std::vector<std::string> scheduling_gates;  // spec.schedulingGates' names
  std::string phase;                          // Pending, Running, Succeeded, Failed, Unknown
  std::string reason;
  std::string message;
  std::string pod_ip;
  std::optional<absl::Time> start_time;
  std::vector<PodCondition> conditions;
  std::vector<ContainerStatus> container_statuses;

  const PodCondition* Condition(std::string_view type) const;
};

// Fails only when the object is not a Pod at all (not an object, no metadata.name);
// mistyped optional fields are left empty.
absl::StatusOr<Pod> DecodePod(const nlohmann::json& j);

}  // namespace lockstep::kube
