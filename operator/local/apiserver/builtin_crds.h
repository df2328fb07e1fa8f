#pragma once
// The CustomResourceDefinitions `lockstep local` installs on start (crds/, compiled in), so a
// TrainingJob (or, with --tfjob, a TFJob) can be applied to a fresh local cluster at once.

#include <string_view>

#include "absl/status/status.h"

namespace lockstep::local {

// The YAML of crds/lockstep.io_trainingjobs.yaml.
std::string_view TrainingJobCrdYaml();
// The YAML of crds/kubeflow.org_tfjobs.yaml (Kubeflow's TFJob CRD with the operator's status
// fields), installed by `lockstep local --tfjob`.
std::string_view TfJobCrdYaml();

class ApiServer;
// Creates the CRD in `yaml` (its first document) through `api`; an error with the server's
// answer when it is refused.
absl::Status InstallCrd(ApiServer* api, std::string_view yaml);

}  // namespace lockstep::local
