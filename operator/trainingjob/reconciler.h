#pragma once
// Reconciler: the only part of the TrainingJob controller that does I/O. For one job key it
// reads the caches (pods, Services, Secrets, PodGroups, and the progress poller's latest
// reading; it never waits on a pod itself), asks MakePlan what should be, writes the status (first,
// and only when it changed), then carries out the plan's creates and deletes and records its
// events.
//
// Writes: the status goes through UpdateStatus with the cached resourceVersion, so a stale
// cache gets 409 and the key is retried rather than overwriting newer status. Every create
// and delete is registered with Expectations before it is sent; a job with outstanding
// expectations is not planned until the informers have caught up. AlreadyExists on create
// and NotFound on delete count as done. Deletes carry a UID precondition, so a pod recreated
// under the same name is never deleted by mistake. The REST client's token bucket limits the
// write rate.
// A run of creates (or of deletes) goes out in parallel, in batches of 4, 8, 16...: a job's
// Services and pods cost a few round trips, not one per object, and a batch that fails stops
// the rest of its run (the next reconcile retries), as Kubernetes' controllers start slow.
// Thread-safety: Reconcile may run on several threads for different keys (the work queue
// never gives one key to two workers).

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "operator/api/field_errors.h"
#include "operator/api/trainingjob_types.h"
#include "operator/kube/rest_client.h"
#include "operator/runtime/cache.h"
#include "operator/runtime/controller.h"
#include "operator/runtime/event_recorder.h"
#include "operator/trainingjob/expectations.h"
#include "operator/trainingjob/observed.h"
#include "operator/trainingjob/planner.h"
#include "operator/trainingjob/progress_poller.h"
#include "operator/trainingjob/progress_target.h"

namespace lockstep::trainingjob {

// A TrainingJob as the job informer caches it: its metadata (the header children have,
// observed.h), what the controller reads of it between reconciles (its state, and whom the
// progress poller asks), and the object itself as compact JSON, decoded by each reconcile. A
// job of 4 replicas costs 2.23 KB cached so, against 4.29 KB decoded (bench/informer_bench
// BM_ControllerCacheMemory); the decode takes 40 us where a reconcile used to copy the decoded
// job (BM_ReconcileReadsCachedJob).
struct JobObject {
  // The job decoded leniently (a field this version does not know is tolerated) with the
  // problems kept, so an invalid job still reaches the planner and gets Failed/InvalidSpec
  // instead of vanishing from the cache.
  struct Decoded {
    api::TrainingJob job;
    api::FieldErrors errors;
  };
  Decoded Decode() const;

  ChildMeta metadata;
  api::JobState state = api::JobState::kPending;  // status.state
  ProgressSpeaker progress;
  // For the per-job metrics: status.restartCount, spec.runPolicy.backoffLimit (unset for a
  // TFJob without one) and the conditions that are True.
  int32_t restart_count = 0;
  std::optional<int32_t> backoff_limit;
  bool managed_elsewhere = false;  // a TFJob another controller runs (runPolicy.managedBy)
  std::vector<api::ConditionType> true_conditions;
  std::string json;
};
absl::StatusOr<JobObject> DecodeJobObject(const nlohmann::json& j);

// Services, Secrets and PodGroups are cached as what the planner reads of their metadata: a
// Secret's data never enters memory.
struct ObjectHeader {
  ChildMeta metadata;
};
absl::StatusOr<ObjectHeader> DecodeObjectHeader(const nlohmann::json& j);

// "ns/name" of the TrainingJob that controls a child, or "" when none does.
std::string ControllerKey(const ChildMeta& m);

// Metric names the reconciler maintains.
inline constexpr char kPodsCreatedMetric[] = "lockstep_pods_created_total";
inline constexpr char kPodsDeletedMetric[] = "lockstep_pods_deleted_total";
inline constexpr char kRestartsMetric[] = "lockstep_job_restarts_total";
inline constexpr char kRecoverySecondsMetric[] = "lockstep_job_recovery_seconds";
inline constexpr char kReconcileLatencyMetric[] = "lockstep_reconcile_duration_seconds";
inline constexpr char kThrottleWaitMetric[] = "lockstep_reconcile_throttle_wait_seconds";
inline constexpr char kReconcileErrorsMetric[] = "lockstep_reconcile_errors_total";
void DeclareReconcilerMetrics(common::MetricsRegistry* metrics);

struct ReconcilerOptions {
  PlannerOptions planner;
};

struct ReconcilerDeps {
  kube::RestClient* client = nullptr;
  const runtime::Cache<JobObject>* jobs = nullptr;
  const runtime::Cache<ObservedPod>* pods = nullptr;
  const runtime::Cache<ObjectHeader>* services = nullptr;
  const runtime::Cache<ObjectHeader>* secrets = nullptr;
  const runtime::Cache<ObjectHeader>* pod_groups = nullptr;  // null: gang scheduling off
  Expectations* expectations = nullptr;
  runtime::EventRecorder* events = nullptr;
  const ProgressPoller* progress = nullptr;  // null: no progress is read
  common::MetricsRegistry* metrics = nullptr;
  common::Clock* clock = nullptr;
};

class Reconciler {
 public:
  Reconciler(ReconcilerDeps deps, ReconcilerOptions options);

  absl::StatusOr<runtime::ReconcileResult> Reconcile(const std::string& key);

 private:
  absl::Status Execute(const std::string& key, const api::TrainingJob& job, const Action& a);
  // Every action in order, runs of one kind in parallel batches. Adds to `throttled` the
  // time spent waiting for the client-side throttle: each batch's longest wait, as its
  // requests wait side by side.
  absl::Status ExecuteAll(const std::string& key, const api::TrainingJob& job,
                          const std::vector<Action>& actions, absl::Duration* throttled);
  void Record(const api::TrainingJob& job, runtime::EventType type, const std::string& reason,
              const std::string& message, bool essential = false);

  ReconcilerDeps d_;
  ReconcilerOptions options_;
  // A served TFJob's CRD prunes its status: logged once, said once per job in an event.
  std::atomic<bool> warned_pruned_{false};
  std::mutex pruned_mu_;
  std::set<std::string> pruned_uids_;
};

}  // namespace lockstep::trainingjob
