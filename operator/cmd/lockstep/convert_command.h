#pragma once
// `lockstep convert [--to=TrainingJob|v1] FILE...`: Kubeflow TFJob manifests of any version
// (operator/tfjob/convert.h) rewritten as TrainingJobs (the default) or as kubeflow.org/v1
// TFJobs, printed as YAML on stdout, each change said on stderr. Other documents pass through
// unchanged. A converted TrainingJob is validated as `lockstep validate` would.

#include <ostream>
#include <string>
#include <vector>

namespace lockstep::cli {

// The process exit code: 0 when every file converted (and every TrainingJob made is valid), 1
// when one could not be read or converted or is invalid, 2 for bad arguments.
int RunConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace lockstep::cli
