#pragma once
// A Kubeflow `kubeflow.org/v1` TFJob served as it is (`lockstep local --tfjob`, the chart's
// tfjob.enabled): the controller reads it as the TrainingJob it plans and writes its status back
// in TFJob's shape, so `kubectl wait --for=condition=Succeeded tfjob/X`, Kubeflow Pipelines'
// launcher and Katib read it as they read training-operator's.
//
// Read as training-operator 1.9 reads it (SetDefaults_TFJob, the TFJob webhook): replica types
// Chief, Master, Worker, PS and Evaluator in any case; restartPolicy Never, cleanPodPolicy None,
// successPolicy "" (the chief or Master, else worker 0) and no backoff limit when unset; every
// replica type needs a container named "tensorflow" with an image; at most one Chief or Master.
// The restart semantics are the operator's (docs/tasks/migrate-from-tfjob.md): one pod restarted
// alone where it can be, a parameter server's loss restarting the group from its checkpoint,
// backoffLimit counted for every restart policy, an evaluator's failure never failing the job.
// Thread-safety: pure functions.

#include <string_view>

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"
#include "operator/api/trainingjob_types.h"

namespace lockstep::tfjob {

// The runPolicy.managedBy values whose TFJobs this operator runs: none, and training-operator's
// own ("kubeflow.org/training-operator"), whose place it takes. Any other (Kueue's MultiKueue,
// "kueue.x-k8s.io/multikueue") belongs to another controller.
bool ManagedHere(std::string_view managed_by);

// The TFJob `j` (as an API server returns it) as the TrainingJob the controller plans: its kind
// and apiVersion kept, job.tfjob set, its status read from TFJob's shape. Never throws: every
// problem is appended to `errors` (the job then fails InvalidSpec naming it).
api::TrainingJob DecodeServedTfJob(const nlohmann::json& j, api::FieldErrors* errors);

// `status` in TFJob's shape: each condition with lastUpdateTime, replicaStatuses keyed by the
// job's own type names (Master); the operator's further fields beside them, which the served CRD
// (crds/kubeflow.org_tfjobs.yaml) holds.
nlohmann::json EncodeServedTfJobStatus(const api::TrainingJob& job,
                                       const api::TrainingJobStatus& status);

}  // namespace lockstep::tfjob
