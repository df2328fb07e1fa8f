#pragma once
// `lockstep validate FILE...`: decodes and validates every TrainingJob in the given manifests
// without a cluster, printing each problem with its field path. Other kinds are skipped.

#include <ostream>
#include <string>
#include <vector>

namespace lockstep::cli {

// Returns the process exit code: 0 when every TrainingJob is valid, 1 when any is not or a file
// cannot be read or parsed.
int RunValidate(const std::vector<std::string>& files, std::ostream& out, std::ostream& err);

}  // namespace lockstep::cli
