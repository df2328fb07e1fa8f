#pragma once
// Validation of a decoded TrainingJob: the bounds the CRD schema also enforces (so an object
// that never passed through an API server is held to the same rules) and everything the schema
// cannot express (DESIGN section 2): replica shape per strategy, names that must stay within 63
// characters, failure rules that refer to existing replica types. Every error names its field.
// Thread-safety: pure functions.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "operator/api/field_errors.h"
#include "operator/api/trainingjob_json.h"
#include "operator/api/trainingjob_types.h"

namespace lockstep::api {

FieldErrors ValidateTrainingJob(const TrainingJob& job);

// Decodes and, when decoding found nothing wrong, validates. `out` receives the decoded job.
FieldErrors CheckTrainingJob(const nlohmann::json& j, TrainingJob* out,
                             const DecodeOptions& options = {});

// CheckTrainingJob as a status: InvalidArgument listing every error.
absl::StatusOr<TrainingJob> TrainingJobFromJson(const nlohmann::json& j,
                                                const DecodeOptions& options = {});

// Pod and Service name of one replica: "<job>-<type in lower case>-<index>".
std::string ReplicaName(std::string_view job_name, ReplicaType type, int32_t index);
// `job`'s pod and Service name of a replica: "<job>-master-0" for a TFJob's Master.
std::string ReplicaName(const TrainingJob& job, ReplicaType type, int32_t index);

// The number of replicas of `type` (0 when the type is absent).
int32_t ReplicaCount(const TrainingJobSpec& spec, ReplicaType type);
// Chief plus Worker replicas: the ones that train.
int32_t TrainingReplicaCount(const TrainingJobSpec& spec);

// The strategy whose restart semantics apply: spec.strategy when set; otherwise
// ParameterServer when the job has PS replicas, MultiWorkerMirrored when more than one replica
// trains, and OneDevice for a single training replica.
Strategy EffectiveStrategy(const TrainingJobSpec& spec);
// runPolicy.recovery, else InPlace for MultiWorkerMirrored and RestartGroup otherwise (only a
// MultiWorkerMirrored group recovers in place: its trainers rejoin a coordination service).
Recovery EffectiveRecovery(const TrainingJobSpec& spec);

}  // namespace lockstep::api
