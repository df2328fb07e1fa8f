#pragma once
// The names, labels and annotations of the objects a TrainingJob owns (DESIGN section 3).
// Thread-safety: constants and pure functions.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "operator/api/trainingjob_types.h"

namespace lockstep::trainingjob {

inline constexpr std::string_view kJobNameLabel = "lockstep.io/job-name";
inline constexpr std::string_view kReplicaTypeLabel = "lockstep.io/replica-type";
inline constexpr std::string_view kReplicaIndexLabel = "lockstep.io/replica-index";
inline constexpr std::string_view kAttemptLabel = "lockstep.io/attempt";
// How many times this replica's pod was recreated alone within the attempt (in-place
// recovery): 0 for the attempt's first pod.
inline constexpr std::string_view kIncarnationLabel = "lockstep.io/incarnation";

// A served TFJob's children carry training-operator's labels too (Katib finds a trial's primary
// pod by job-role, pipelines select by job-name): training.kubeflow.org/...
inline constexpr std::string_view kKubeflowJobNameLabel = "training.kubeflow.org/job-name";
inline constexpr std::string_view kKubeflowOperatorNameLabel =
    "training.kubeflow.org/operator-name";
inline constexpr std::string_view kKubeflowReplicaTypeLabel = "training.kubeflow.org/replica-type";
inline constexpr std::string_view kKubeflowReplicaIndexLabel =
    "training.kubeflow.org/replica-index";
inline constexpr std::string_view kKubeflowJobRoleLabel = "training.kubeflow.org/job-role";
inline constexpr std::string_view kKubeflowOperatorName = "tfjob-controller";

// Kueue's pod groups (docs/tasks/queue-with-kueue.md): what the operator sets on a queued job's
// pods, and what Kueue's webhook and controller set that the operator reads.
inline constexpr std::string_view kKueueQueueLabel = "kueue.x-k8s.io/queue-name";
inline constexpr std::string_view kKueueGroupLabel = "kueue.x-k8s.io/pod-group-name";
inline constexpr std::string_view kKueueTotalCountAnnotation =
    "kueue.x-k8s.io/pod-group-total-count";
inline constexpr std::string_view kKueueRetriableAnnotation = "kueue.x-k8s.io/retriable-in-group";
inline constexpr std::string_view kKueueFinalizer = "kueue.x-k8s.io/managed";
inline constexpr std::string_view kKueueAdmissionGate = "kueue.x-k8s.io/admission";

// The per-job Secret holding the token peers present to each other, and its key.
inline constexpr std::string_view kTokenKey = "token";
std::string TokenSecretName(std::string_view job_name);

// "lockstep.io/job-name=<job>,lockstep.io/replica-type=<type>": a replica type's pods.
std::string ReplicaSelector(std::string_view job_name, api::ReplicaType type);

// The owner reference every child carries: controller and blockOwnerDeletion set; of the job's
// own kind (a TrainingJob, or a served TFJob).
api::OwnerReference ControllerRef(const api::TrainingJob& job);

// The replica type a lockstep.io/replica-type label names ("worker"); unset when absent or
// not a type.
std::optional<api::ReplicaType> ReplicaTypeLabel(const std::map<std::string, std::string>& labels);
// Parses a decimal label value; -1 when absent or malformed.
int32_t LabelInt(const std::map<std::string, std::string>& labels, std::string_view key);

}  // namespace lockstep::trainingjob
