#pragma once
// The TrainingJob API (lockstep.io/v1alpha1) as C++ values: spec, status and their enums.
//
// Defaulting: a field the CRD gives a default to is a plain member initialised to that default
// (the kDefault* constants below), so a decoded TrainingJob is always defaulted; a field without
// a default is std::optional. crds/lockstep.io_trainingjobs.yaml carries the same defaults, and
// defaults_test checks that the two agree.
// Thread-safety: plain values.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/enum_names.h"
#include "operator/api/object_meta.h"
#include "operator/api/pod_template.h"

namespace lockstep::api {

inline constexpr std::string_view kGroup = "lockstep.io";
inline constexpr std::string_view kVersion = "v1alpha1";
inline constexpr std::string_view kApiVersion = "lockstep.io/v1alpha1";
inline constexpr std::string_view kKind = "TrainingJob";
inline constexpr std::string_view kPlural = "trainingjobs";
// Kubeflow's TFJob, which the operator serves too when asked (operator/tfjob/served.h).
inline constexpr std::string_view kTfJobApiVersion = "kubeflow.org/v1";
inline constexpr std::string_view kTfJobKind = "TFJob";

// ---- enums and their API spellings ----

enum class ReplicaType { kChief, kEvaluator, kPS, kWorker };  // JSON key order
inline constexpr std::array<EnumName<ReplicaType>, 4> kReplicaTypeNames{{
    {ReplicaType::kChief, "Chief"},
    {ReplicaType::kEvaluator, "Evaluator"},
    {ReplicaType::kPS, "PS"},
    {ReplicaType::kWorker, "Worker"},
}};
// Lower-case form used in pod names, labels and TF_CONFIG ("worker", "ps").
std::string_view ReplicaTypeLower(ReplicaType t);
struct TrainingJob;
// As `job`'s pod names and TF_CONFIG spell it: "master" for the chief of a TFJob keyed Master.
std::string_view ReplicaTypeLower(const TrainingJob& job, ReplicaType t);
// As `job`'s status.replicaStatuses keys it: "Master" for the chief of a TFJob keyed Master.
std::string_view ReplicaTypeName(const TrainingJob& job, ReplicaType t);

enum class Strategy {
  kOneDevice,
  kMirrored,
  kMultiWorkerMirrored,
  kParameterServer,
  kCentralStorage
};
inline constexpr std::array<EnumName<Strategy>, 5> kStrategyNames{{
    {Strategy::kOneDevice, "OneDevice"},
    {Strategy::kMirrored, "Mirrored"},
    {Strategy::kMultiWorkerMirrored, "MultiWorkerMirrored"},
    {Strategy::kParameterServer, "ParameterServer"},
    {Strategy::kCentralStorage, "CentralStorage"},
}};

enum class RestartPolicy { kAlways, kOnFailure, kNever, kExitCode };
inline constexpr std::array<EnumName<RestartPolicy>, 4> kRestartPolicyNames{{
    {RestartPolicy::kAlways, "Always"},
    {RestartPolicy::kOnFailure, "OnFailure"},
    {RestartPolicy::kNever, "Never"},
    {RestartPolicy::kExitCode, "ExitCode"},
}};

enum class CleanPodPolicy { kAll, kRunning, kNone };
inline constexpr std::array<EnumName<CleanPodPolicy>, 3> kCleanPodPolicyNames{{
    {CleanPodPolicy::kAll, "All"},
    {CleanPodPolicy::kRunning, "Running"},
    {CleanPodPolicy::kNone, "None"},
}};

// What a lost member of a synchronous group costs (runPolicy.recovery): InPlace replaces the
// lost pod alone while the survivors keep their state; RestartGroup restarts every training
// pod from the last checkpoint.
enum class Recovery { kInPlace, kRestartGroup };
inline constexpr std::array<EnumName<Recovery>, 2> kRecoveryNames{{
    {Recovery::kInPlace, "InPlace"},
    {Recovery::kRestartGroup, "RestartGroup"},
}};

enum class SuccessPolicy { kDefault, kAllWorkers };
inline constexpr std::array<EnumName<SuccessPolicy>, 2> kSuccessPolicyNames{{
    {SuccessPolicy::kDefault, "Default"},
    {SuccessPolicy::kAllWorkers, "AllWorkers"},
}};

// What a matching failure rule does: fail the job, restart the training group (new attempt),
// restart only the failed pod, or restart the pod without spending the backoff budget.
enum class FailureAction { kFailJob, kRestartJob, kRestartPod, kIgnore };
inline constexpr std::array<EnumName<FailureAction>, 4> kFailureActionNames{{
    {FailureAction::kFailJob, "FailJob"},
    {FailureAction::kRestartJob, "RestartJob"},
    {FailureAction::kRestartPod, "RestartPod"},
    {FailureAction::kIgnore, "Ignore"},
}};

enum class ExitCodeOperator { kIn, kNotIn };
inline constexpr std::array<EnumName<ExitCodeOperator>, 2> kExitCodeOperatorNames{{
    {ExitCodeOperator::kIn, "In"},
    {ExitCodeOperator::kNotIn, "NotIn"},
}};

// ---- defaults (mirrored by the CRD) ----

inline constexpr int32_t kDefaultReplicas = 1;
inline constexpr RestartPolicy kDefaultRestartPolicy = RestartPolicy::kOnFailure;
inline constexpr int32_t kDefaultBackoffLimit = 6;
inline constexpr CleanPodPolicy kDefaultCleanPodPolicy = CleanPodPolicy::kRunning;
inline constexpr int32_t kDefaultPendingTimeoutSeconds = 600;
inline constexpr SuccessPolicy kDefaultSuccessPolicy = SuccessPolicy::kDefault;

// ---- spec ----

struct ReplicaSpec {
  int32_t replicas = kDefaultReplicas;
  RestartPolicy restart_policy = kDefaultRestartPolicy;
  PodTemplate pod_template;

  bool operator==(const ReplicaSpec&) const = default;
};

struct SchedulingPolicy {
  std::optional<int32_t> min_available;  // unset: every replica
  std::string queue;
  std::string priority_class;
  std::optional<int32_t> schedule_timeout_seconds;

  bool operator==(const SchedulingPolicy&) const = default;
};

// Bounds on the Worker count of an elastic MultiWorkerMirrored job (runPolicy.elastic): a
// scale within them adds or removes workers without restarting the group.
struct Elastic {
  int32_t min_replicas = 1;
  int32_t max_replicas = 1;

  bool operator==(const Elastic&) const = default;
};

struct RunPolicy {
  int32_t backoff_limit = kDefaultBackoffLimit;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int32_t> ttl_seconds_after_finished;
  CleanPodPolicy clean_pod_policy = kDefaultCleanPodPolicy;
  bool suspend = false;
  int32_t pending_timeout_seconds = kDefaultPendingTimeoutSeconds;
  std::optional<int32_t> progress_deadline_seconds;
  std::optional<SchedulingPolicy> scheduling_policy;
  // Unset: InPlace for MultiWorkerMirrored (EffectiveRecovery in validation.h).
  std::optional<Recovery> recovery;
  std::optional<Elastic> elastic;

  bool operator==(const RunPolicy&) const = default;
};

struct ExitCodeMatcher {
  ExitCodeOperator op = ExitCodeOperator::kIn;
  std::vector<int32_t> values;

  bool operator==(const ExitCodeMatcher&) const = default;
};

struct FailureRule {
  FailureAction action = FailureAction::kFailJob;
  std::optional<ExitCodeMatcher> on_exit_codes;
  std::vector<std::string> on_reasons;     // termination reasons, e.g. Evicted, PeerLost
  std::vector<ReplicaType> replica_types;  // empty: every type

  bool operator==(const FailureRule&) const = default;
};

struct FailurePolicy {
  std::vector<FailureRule> rules;  // ordered; the first match wins

  bool operator==(const FailurePolicy&) const = default;
};

struct TfConfigSpec {
  bool include_evaluator = true;
  std::string cluster_domain;  // empty: hosts end in ".svc"

  bool operator==(const TfConfigSpec&) const = default;
};

struct TrainingJobSpec {
  // Unset: the operator infers restart semantics from the replica shape (see
  // EffectiveStrategy in validation.h), which is what a converted Kubeflow TFJob needs.
  std::optional<Strategy> strategy;
  std::map<ReplicaType, ReplicaSpec> replica_specs;
  RunPolicy run_policy;
  SuccessPolicy success_policy = kDefaultSuccessPolicy;
  std::optional<FailurePolicy> failure_policy;
  TfConfigSpec tf_config;

  bool operator==(const TrainingJobSpec&) const = default;
};

// ---- status ----

enum class ConditionType {
  kCreated,
  kRunning,
  kRestarting,
  kSucceeded,
  kFailed,
  kSuspended,
  kStalled,
  kSpecRefused,  // a spec change the job cannot take while it runs (its replica counts)
};
inline constexpr std::array<EnumName<ConditionType>, 8> kConditionTypeNames{{
    {ConditionType::kCreated, "Created"},
    {ConditionType::kRunning, "Running"},
    {ConditionType::kRestarting, "Restarting"},
    {ConditionType::kSucceeded, "Succeeded"},
    {ConditionType::kFailed, "Failed"},
    {ConditionType::kSuspended, "Suspended"},
    {ConditionType::kStalled, "Stalled"},
    {ConditionType::kSpecRefused, "SpecRefused"},
}};

enum class ConditionStatus { kTrue, kFalse, kUnknown };
inline constexpr std::array<EnumName<ConditionStatus>, 3> kConditionStatusNames{{
    {ConditionStatus::kTrue, "True"},
    {ConditionStatus::kFalse, "False"},
    {ConditionStatus::kUnknown, "Unknown"},
}};

struct Condition {
  ConditionType type = ConditionType::kCreated;
  ConditionStatus status = ConditionStatus::kUnknown;
  std::string reason;
  std::string message;
  absl::Time last_transition_time = absl::UnixEpoch();
  int64_t observed_generation = 0;

  bool operator==(const Condition&) const = default;
};

// The job's state, derived from its conditions (job_state.h) and also written to status.state
// so that `kubectl get tj` can show it.
enum class JobState { kPending, kCreated, kRunning, kRestarting, kSuspended, kSucceeded, kFailed };
inline constexpr std::array<EnumName<JobState>, 7> kJobStateNames{{
    {JobState::kPending, "Pending"},
    {JobState::kCreated, "Created"},
    {JobState::kRunning, "Running"},
    {JobState::kRestarting, "Restarting"},
    {JobState::kSuspended, "Suspended"},
    {JobState::kSucceeded, "Succeeded"},
    {JobState::kFailed, "Failed"},
}};

struct ReplicaStatus {
  int32_t active = 0;
  int32_t ready = 0;
  int32_t succeeded = 0;
  int32_t failed = 0;
  int32_t restarts = 0;
  std::string selector;  // label selector of this type's pods, for the scale subresource
  // Indexes whose replica succeeded, as Kubernetes Jobs write completedIndexes ("0,2-4").
  // The operator's memory of success: a completed replica is never recreated, even after
  // its pod is gone.
  std::string completed_indexes;

  bool operator==(const ReplicaStatus&) const = default;
};

// One recovery of the training group without a restart (status.recoveries), as the chief
// reported it: the lost member replaced, the group re-formed, the state handed over.
struct RecoveryRecord {
  std::optional<absl::Time> time;  // when the chief saw the failure
  int32_t attempt = 0;             // the group's attempt it happened in
  int64_t epoch = 0;               // the membership epoch the group re-formed into
  std::string replaced;            // "worker 1"
  std::string cause;               // what began the epoch
  double rendezvous_seconds = 0;   // failure seen -> group re-formed
  double state_transfer_seconds = 0;
  double recovery_seconds = 0;  // failure seen -> every rank stepping again
  int64_t resumed_step = 0;
  int64_t steps_lost = 0;
  bool planned = false;  // an elastic group's member joined or left, rather than a failure
  int32_t replicas = 0;  // the group's size after (0: not reported)

  bool operator==(const RecoveryRecord&) const = default;
};
inline constexpr size_t kMaxRecoveryRecords = 5;

struct Progress {
  int64_t step = 0;
  std::optional<int64_t> total_steps;
  std::optional<int64_t> epoch;
  std::optional<double> loss;
  std::map<std::string, double> metrics;
  std::optional<double> samples_per_second;
  std::optional<int64_t> last_checkpoint_step;
  std::optional<int64_t> estimated_remaining_seconds;
  std::optional<absl::Time> update_time;
  std::string summary;  // "45% (450/1000)", for the Progress printer column
  // The group training now (its replicas: an elastic group's live membership) and the global
  // batch they share (a replica count must divide it).
  std::optional<int64_t> replicas;
  std::optional<int64_t> global_batch;
  // The trainer's recoveries (its /progress); the planner moves them to status.recoveries,
  // and status.progress never carries them.
  std::vector<RecoveryRecord> recoveries;

  bool operator==(const Progress&) const = default;
};

// The chief's (else worker 0's) evaluation of the test set at the end of a successful run, from
// its termination message (status.evaluation).
struct Evaluation {
  std::optional<double> loss;
  std::map<std::string, double> metrics;  // "accuracy"
  std::string summary;                    // "accuracy 0.8862, loss 0.3187": the Result column

  bool operator==(const Evaluation&) const = default;
};

// An elastic job's Worker count as the operator runs it (status.elastic): the last count
// accepted, and why the one asked for is not (a count outside runPolicy.elastic, or one whose
// group would not divide the global batch).
struct ElasticStatus {
  int32_t workers = 0;
  int32_t requested = 0;  // spec.replicaSpecs.Worker.replicas when last looked at
  std::string refused;    // "" when `requested` was accepted

  bool operator==(const ElasticStatus&) const = default;
};

struct TrainingJobStatus {
  std::vector<Condition> conditions;
  JobState state = JobState::kPending;
  std::map<ReplicaType, ReplicaStatus> replica_statuses;
  std::string ready;          // "3/3": ready pods of all pods, for the Ready printer column
  int32_t restart_count = 0;  // restarts spent against backoffLimit
  int32_t attempt = 0;        // the training group's restart generation (lockstep.io/attempt)
  // Failures already counted, per pod UID: the pod's container restarts plus one if it failed.
  // Counting the difference on every reconcile keeps restartCount exact when a reconcile is
  // repeated or a status write is lost.
  std::map<std::string, int32_t> counted_failures;
  // Pods recreated alone within the attempt (in-place recovery), by pod name: the incarnation
  // the next one gets (lockstep.io/incarnation). A group restart clears it.
  std::map<std::string, int32_t> incarnations;
  // The replica counts the job runs at, by replica type name, recorded when it starts (and
  // while it is suspended): a change of the spec's counts while it runs is held off
  // (SpecRefused), for servers without the CRD's CEL rule. An elastic job's Workers are
  // status.elastic's.
  std::map<std::string, int32_t> replica_counts;
  // Pods of the training group deleted or evicted by another party (kubectl delete, a drain's
  // eviction, a preemption) and replaced alone within the attempt, by pod name: the cause, until
  // the replacement has rejoined (the recovery that names it carries the cause on). Such a
  // disruption is not counted against backoffLimit.
  std::map<std::string, std::string> disruptions;
  std::vector<RecoveryRecord> recoveries;  // the last kMaxRecoveryRecords, oldest first
  std::optional<ElasticStatus> elastic;    // elastic jobs
  std::optional<absl::Time> start_time;
  std::optional<absl::Time> completion_time;
  std::optional<absl::Time> last_reconcile_time;
  int64_t observed_generation = 0;
  std::optional<Progress> progress;
  std::optional<Evaluation> evaluation;  // a succeeded job's final figures

  bool operator==(const TrainingJobStatus&) const = default;
};

// A Kubeflow `kubeflow.org/v1` TFJob served as a TrainingJob (operator/tfjob/served.h): what
// its children and status spell as training-operator does.
struct TfJobForm {
  bool master = false;          // its chief is keyed Master: pods <job>-master-<i>, "master"
  bool dynamic_worker = false;  // spec.enableDynamicWorker: the sparse TF_CONFIG
  // spec.runPolicy.managedBy names another controller (Kueue's MultiKueue...): not run here.
  std::string managed_elsewhere;

  bool operator==(const TfJobForm&) const = default;
};

struct TrainingJob {
  // A served TFJob keeps its own ("kubeflow.org/v1", "TFJob"): its children's owner references
  // and its events name it.
  std::string api_version{kApiVersion};
  std::string kind{kKind};
  ObjectMeta metadata;
  TrainingJobSpec spec;
  std::optional<TrainingJobStatus> status;
  std::optional<TfJobForm> tfjob;  // set when the job is a served TFJob

  bool operator==(const TrainingJob&) const = default;
};

}  // namespace lockstep::api
