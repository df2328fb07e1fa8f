#pragma once
// `lockstep run FILE`: applies a manifest to the current cluster (the local one unless
// --kubeconfig or $KUBECONFIG names another; a local cluster that is not running is started),
// then follows its TrainingJob with a live progress line and its conditions until the job
// ends. Exit code: 0 when the job succeeded, 1 when it failed or the manifest is invalid,
// 2 for usage errors.

#include <ostream>
#include <string>
#include <vector>

namespace lockstep::cli {

int RunRun(const std::vector<std::string>& args, const std::string& self, std::ostream& out,
           std::ostream& err);

}  // namespace lockstep::cli
