#pragma once
// The CustomResourceDefinitions `lockstep local` installs on start (crds/, compiled in), so a
// TrainingJob can be applied to a fresh local cluster at once.

#include <string_view>

namespace lockstep::local {

// The YAML of crds/lockstep.io_trainingjobs.yaml.
std::string_view TrainingJobCrdYaml();

}  // namespace lockstep::local
