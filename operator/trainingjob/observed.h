#pragma once
// The planner's view of the world, typed: what kind of child an action is about (ChildKind),
// a pod's phase (PodPhase), and the part of a pod the planner reads (ObservedPod). Strings
// from the API are parsed into these once, where objects come in (the pod informer's decoder,
// see observe.h); nothing deeper compares phase or resource names as strings.
// Thread-safety: plain values and pure functions.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// What the planner reads of a child's metadata (pods, Services, Secrets, PodGroups; the job
// cache keeps a TrainingJob's own this way too), parsed once where the object comes in
// (observe.h) and nothing more: the controller caches 20,000 children at scale. Its six
// strings share one allocation ("namespace/name", then the UID, resourceVersion, and the
// controller's UID and name): a cached Service costs 0.44 KB, against 1.37 KB with an
// api::ObjectMeta, its label map and owner references (bench/informer_bench
// BM_ControllerCacheMemory). The job name label is the informers' selector, so it is not kept.
class ChildMeta {
 public:
  struct Strings {
    std::string_view namespace_;
    std::string_view name;
    std::string_view uid;
    std::string_view resource_version;
    // The controlling owner reference's UID (any kind), and its name when it is a
    // TrainingJob of this API version (or a served kubeflow.org/v1 TFJob); both empty when
    // nothing controls the object.
    std::string_view controller_uid;
    std::string_view controller_job;
  };

  ChildMeta() = default;
  explicit ChildMeta(const Strings& s) { Set(s); }

  std::string_view namespace_() const { return chars_.Part(0); }
  std::string_view name() const { return chars_.Part(1); }
  std::string_view key() const { return chars_.View(0, chars_.ends[1]); }  // "namespace/name"
  std::string_view uid() const { return chars_.Part(2); }
  std::string_view resource_version() const { return chars_.Part(3); }
  std::string_view controller_uid() const { return chars_.Part(4); }
  std::string_view controller_job() const { return chars_.Part(5); }
  Strings strings() const;
  // Replaces the strings (the fields below stay).
  void Set(const Strings& s);

  std::optional<absl::Time> creation_timestamp;
  std::optional<absl::Time> deletion_timestamp;
  // lockstep.io/replica-type, -replica-index and -attempt; unset or -1 when absent or not
  // valid (the planner deletes such a pod).
  std::optional<api::ReplicaType> replica_type;
  int32_t replica_index = -1;
  int32_t attempt = -1;
  int32_t incarnation = 0;  // lockstep.io/incarnation (0 when absent)

 private:
  // The characters, and where the namespace, name, UID, resourceVersion, controller UID and
  // controller name end (a '/' follows a namespace). A copy is deep; a moved-from one is empty.
  struct Chars {
    Chars() = default;
    Chars(const Chars& o) { *this = o; }
    Chars& operator=(const Chars& o);
    Chars(Chars&& o) noexcept : bytes(std::move(o.bytes)), ends(std::exchange(o.ends, {})) {}
    Chars& operator=(Chars&& o) noexcept {
      bytes = std::move(o.bytes);
      ends = std::exchange(o.ends, {});
      return *this;
    }

    std::string_view View(uint32_t begin, uint32_t end) const {
      return begin >= end ? std::string_view() : std::string_view(bytes.get() + begin, end - begin);
    }
    // Part i: 0 namespace, 1 name, 2 UID, 3 resourceVersion, 4 controller UID, 5 its name.
    std::string_view Part(size_t i) const {
      if (i == 0) return View(0, ends[0]);
      return View(i == 1 && ends[0] != 0 ? ends[0] + 1 : ends[i - 1], ends[i]);
    }

    std::unique_ptr<char[]> bytes;
    std::array<uint32_t, 6> ends{};
  };
  Chars chars_;
};

// The cache's key ("namespace/name"), owner index (the controller's UID) and resourceVersion
// of a child (runtime/cache.h).
std::string KeyOf(const ChildMeta& m);
std::vector<std::string> OwnerUids(const ChildMeta& m);
inline std::string_view ResourceVersionOf(const ChildMeta& m) { return m.resource_version(); }

// Why a pod is not simply running, as far as the planner reads it: kept out of line because
// most pods have none of it (ObservedPod::detail is null then).
struct PodDetail {
  std::string reason;   // status.reason (Evicted, Preempted, ...)
  std::string message;  // status.message
  // The DisruptionTarget condition's reason (EvictionByEvictionAPI, PreemptionByScheduler,
  // DeletionByTaintManager, TerminationByKubelet) and message, when it is True.
  std::string disruption_reason;
  std::string disruption_message;
  // PodScheduled False's message: why the pod cannot be scheduled.
  std::string unschedulable_message;
  // The first container waiting for a reason (ErrImagePull: ...): why a pod is Pending.
  ContainerState waiting;
  // How a failed container ended: the one that terminated with a nonzero exit code, else the
  // one that restarted most after terminating; its state, or its last state when the
  // container restarted. Unset when no container failed.
  std::optional<ContainerState> failure;
  // A succeeded pod's final figures, from its trainer's termination message
  // ({"reason":"Completed","progress":{...},"evaluation":{...}}): the operator's last poll of
  // /progress is up to an interval old when the chief exits.
  std::optional<api::Progress> final_progress;
  std::optional<api::Evaluation> final_evaluation;

  bool operator==(const PodDetail&) const = default;
};

// What the planner reads of a pod. The controller caches 20,000 pods at scale: a running pod
// costs its metadata, a few facts and its IP (an IPv4 address needs no allocation), 0.50 KB
// against 0.81 KB with its container statuses (bench/informer_bench BM_ControllerCacheMemory).
// Copies share the detail, which is never changed once shared.
struct ObservedPod {
  ChildMeta metadata;
  PodPhase phase = PodPhase::kUnknown;
  // The pod conditions the planner reads: Ready and DisruptionTarget with status True, and
  // PodScheduled with status False.
  bool ready = false;
  bool disruption_target = false;  // also Kueue's TerminationTarget (its preemption)
  bool unschedulable = false;
  // Kueue's pod groups: the pod waits on a scheduling gate (Kueue's admission); where Kueue's
  // finalizer is in metadata.finalizers (-1: absent); retriable-in-group is "false" (the group
  // is done, as Kueue reads it).
  bool gated = false;
  int32_t kueue_finalizer = -1;
  bool kueue_group_done = false;
  // Of its containers: whether each one's state is running, and their restarts summed.
  bool containers_running = true;
  int32_t restarts = 0;
  std::string pod_ip;
  std::shared_ptr<const PodDetail> detail;  // null: every field of it is empty

  // The detail, or an empty one.
  const PodDetail& why() const;
  // The detail to change, made or copied first when shared (for the observer and tests).
  PodDetail& mutable_detail();
};

}  // namespace lockstep::trainingjob
