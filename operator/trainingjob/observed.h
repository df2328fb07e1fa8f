#pragma once
// The planner's view of the world, typed: what kind of child an action is about (ChildKind),
// a pod's phase (PodPhase), and the part of a pod the planner reads (ObservedPod). Strings
// from the API are parsed into these once, where objects come in (the pod informer's decoder,
// see observe.h); nothing deeper compares phase or resource names as strings.
// Thread-safety: plain values and pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "operator/api/object_meta.h"
#include "operator/api/pod_status.h"

namespace lockstep::trainingjob {

// The objects a TrainingJob owns, and the job itself (for its TTL deletion).
enum class ChildKind { kPod, kService, kSecret, kPodGroup, kTrainingJob };
// "pods", "services", "secrets", "podgroups", "trainingjobs": for messages and expectations.
std::string_view ChildKindPlural(ChildKind kind);

enum class PodPhase { kUnknown, kPending, kRunning, kSucceeded, kFailed };
// The core/v1 phase name; anything else (or empty) is kUnknown.
PodPhase ParsePodPhase(std::string_view phase);
std::string_view PodPhaseName(PodPhase phase);

using api::ContainerState;
using api::ContainerStatus;
using api::PodCondition;

struct ObservedPod {
  api::ObjectMeta metadata;
  PodPhase phase = PodPhase::kUnknown;
  std::string reason;
  std::string message;
  std::string pod_ip;
  std::vector<PodCondition> conditions;
  std::vector<ContainerStatus> container_statuses;

  const PodCondition* Condition(std::string_view type) const;
  // The condition `type` is present with status "True".
  bool ConditionTrue(std::string_view type) const;
};

}  // namespace lockstep::trainingjob
