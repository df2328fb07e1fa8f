#pragma once
// The CustomResourceDefinitions `lockstep local` installs on start (crds/, compiled in), so a
// TrainingJob (or, with --tfjob, a TFJob) can be applied to a fresh local cluster at once.

#include <string_view>

namespace lockstep::local {

// The YAML of crds/lockstep.io_trainingjobs.yaml.
std::string_view TrainingJobCrdYaml();
// The YAML of crds/kubeflow.org_tfjobs.yaml (Kubeflow's TFJob CRD with the operator's status
// fields), installed by `lockstep local --tfjob`.
std::string_view TfJobCrdYaml();

}  // namespace lockstep::local
