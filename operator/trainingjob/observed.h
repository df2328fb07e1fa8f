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

#include "absl/time/time.h"
#include "operator/api/pod_status.h"
#include "operator/api/trainingjob_types.h"

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

// What the planner reads of a child's metadata (pods, Services, Secrets, PodGroups), parsed
// once where the object comes in (observe.h) and nothing more: the controller caches 20,000
// children at scale, and api::ObjectMeta's label map and owner references cost four times
// this. The job name label is the informers' selector, so it is not kept.
struct ChildMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  std::optional<absl::Time> creation_timestamp;
  std::optional<absl::Time> deletion_timestamp;
  // The controlling owner reference's UID (any kind), and its name when it is a TrainingJob
  // of this API version; both empty when nothing controls the object.
  std::string controller_uid;
  std::string controller_job;
  // lockstep.io/replica-type, -replica-index and -attempt; unset or -1 when absent or not
  // valid (the planner deletes such a pod).
  std::optional<api::ReplicaType> replica_type;
  int32_t replica_index = -1;
  int32_t attempt = -1;
};

// The cache's key ("namespace/name") and owner index (the controller's UID) of a child.
std::string KeyOf(const ChildMeta& m);
std::vector<std::string> OwnerUids(const ChildMeta& m);

struct ObservedPod {
  ChildMeta metadata;
  PodPhase phase = PodPhase::kUnknown;
  std::string reason;
  std::string message;
  std::string pod_ip;
  // The pod conditions the planner reads: Ready and DisruptionTarget with status True, and
  // PodScheduled with status False (with its message: why the pod cannot be scheduled).
  bool ready = false;
  bool disruption_target = false;
  bool unschedulable = false;
  std::string unschedulable_message;
  std::vector<ContainerStatus> container_statuses;
};

}  // namespace lockstep::trainingjob
