#pragma once
// JSON encoding of TrainingJob. Decoding never throws: it returns the job it could read and
// appends a FieldError for every problem (wrong type, out-of-range integer, unsupported enum
// value, unknown field), so one pass reports every mistake in a manifest. Encoding is
// deterministic (sorted keys), so encode(decode(encode(x))) is byte-identical to encode(x).
// Thread-safety: pure functions.

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "operator/api/field_errors.h"
#include "operator/api/trainingjob_types.h"

namespace lockstep::api {

struct DecodeOptions {
  // Manifests from users: a misspelt field is an error. Objects from an API server have been
  // pruned by the CRD schema already; a newer CRD's fields may be tolerated with false.
  bool reject_unknown_fields = true;
};

TrainingJob DecodeTrainingJob(const nlohmann::json& j, FieldErrors* errors,
                              const DecodeOptions& options = {});
nlohmann::json EncodeTrainingJob(const TrainingJob& job);

// Status alone, as written through the status subresource.
TrainingJobStatus DecodeTrainingJobStatus(const nlohmann::json& j, const FieldPath& path,
                                          FieldErrors* errors, const DecodeOptions& options = {});
nlohmann::json EncodeTrainingJobStatus(const TrainingJobStatus& status);

// status.progress alone: what the trainer's GET /progress serves (minus summary and
// updateTime, which the operator adds).
Progress DecodeProgress(const nlohmann::json& j, const FieldPath& path, FieldErrors* errors,
                        const DecodeOptions& options = {});
nlohmann::json EncodeProgress(const Progress& p);
Evaluation DecodeEvaluation(const nlohmann::json& j, const FieldPath& path, FieldErrors* errors,
                            const DecodeOptions& options = {});
nlohmann::json EncodeEvaluation(const Evaluation& e);

}  // namespace lockstep::api
