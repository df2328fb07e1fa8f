#pragma once
// The pure heart of the controller: observed state in, a plan out (STYLE rule 1).
//
// MakePlan(observed, options) recomputes the whole picture on every call (level-triggered):
// which pods, Services, Secret and PodGroup should exist, which must go (surplus replicas,
// pods of a replaced attempt, failed pods being restarted, cleanup of a finished or suspended
// job, the job itself when its TTL has passed), the new status (conditions through the
// transition table of operator/api/job_state.h, replica statuses, restart count, attempt,
// times, progress), the events to record, and when to look again (deadline, TTL, pending and
// progress watchdogs). The reconciler writes the status first and then carries out the
// actions, so a crash between the two repeats actions rather than losing what the status
// remembers (restart count, attempt, completed replicas).
// Everything the planner reads is a field of Observed, typed at the edge (observed.h): it
// calls nothing, and its library (lockstep_planner) links only the API types.
// Thread-safety: pure function over values.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "operator/api/field_errors.h"
#include "operator/api/trainingjob_types.h"
#include "operator/trainingjob/desired.h"
#include "operator/trainingjob/observed.h"

namespace lockstep::trainingjob {

// A child the job owns, as far as the planner needs to know it.
struct ChildRef {
  std::string name;
  std::string uid;
  std::optional<api::ReplicaType> replica_type;  // its labels, as ChildMeta parses them
  int32_t replica_index = -1;
  bool deleting = false;
};

struct Observed {
  api::TrainingJob job;
  api::FieldErrors decode_errors;                        // problems found decoding the job
  std::vector<std::shared_ptr<const ObservedPod>> pods;  // controlled by the job
  std::vector<ChildRef> services;                        // controlled by the job
  bool token_secret_exists = false;
  bool pod_group_exists = false;          // in the PodGroup informer's cache (gang scheduling)
  std::optional<api::Progress> progress;  // the progress poller's latest, while running
  // Pods waiting in ContainerCreating past kMountGrace, by name: their latest FailedMount
  // event's message (a volume whose ConfigMap, Secret or claim does not exist: the kubelet
  // says so only in events, the pod's status stays ContainerCreating).
  std::map<std::string, std::string> mount_failures;
  absl::Time now = absl::UnixEpoch();
};

// How long a pod waits in ContainerCreating before the reconciler looks for its FailedMount
// events (mounting takes a moment; a volume that fails keeps failing).
inline constexpr absl::Duration kMountGrace = absl::Seconds(10);

// Whether a pending pod is one the reconciler looks up FailedMount events for.
bool WaitsToMount(const ObservedPod& pod, absl::Time now);

struct PlannerOptions {
  DesiredOptions desired;
};

struct Action {
  // kPatch: `object` is a JSON Patch (json_patch) or a merge patch for the child `name`.
  enum class Kind { kCreate, kCreateTokenSecret, kDelete, kDeleteJob, kPatch };
  Kind kind = Kind::kCreate;
  ChildKind child = ChildKind::kPod;
  std::string name;
  std::string uid;                    // delete precondition
  nlohmann::json object;              // what to create
  std::string why;                    // for the event
  std::vector<std::string> kept_env;  // user variables kept over injected ones (pods)
  bool json_patch = false;            // kPatch: `object` is a JSON Patch, not a merge patch
};

enum class EventType { kNormal, kWarning };

struct PlannedEvent {
  EventType type = EventType::kNormal;
  std::string reason;
  std::string message;
  // A state change or a condition set: written past the recorder's spam filter and
  // aggregation (runtime::EventRecorder), so the job's events always end on its state.
  bool essential = false;
};

struct Plan {
  api::TrainingJobStatus status;
  std::vector<Action> actions;
  std::vector<PlannedEvent> events;
  std::optional<absl::Duration> requeue_after;
};

Plan MakePlan(const Observed& observed, const PlannerOptions& options);

// Kubernetes Job's completedIndexes form: "0,2-4" <-> {0,2,3,4}. Malformed parts are skipped.
std::set<int32_t> ParseIndexes(std::string_view s);
std::string FormatIndexes(const std::set<int32_t>& indexes);

}  // namespace lockstep::trainingjob
