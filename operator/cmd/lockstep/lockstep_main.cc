// lockstep: the Lockstep command-line tool.

#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include <climits>

#include "operator/cmd/lockstep/convert_command.h"
#include "operator/cmd/lockstep/local_command.h"
#include "operator/cmd/lockstep/run_command.h"
#include "operator/cmd/lockstep/validate_command.h"

namespace {

constexpr const char* kUsage = R"(usage: lockstep COMMAND [ARGS]

commands:
  convert FILE...    rewrite Kubeflow TFJobs of any version as TrainingJobs (or kubeflow.org/v1)
  local up|down|status
                     a Kubernetes-compatible API server on this machine (see `lockstep local`)
  run FILE           apply a manifest (to the local cluster unless KUBECONFIG says otherwise)
                     and follow its TrainingJob until it ends
  validate FILE...   check the TrainingJobs in manifest files (YAML or JSON) without a cluster
  version            print the version

`lockstep COMMAND --help` says more about each. The manual: docs/README.md in the repository.
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() > 1 && args[0] == "help") args = {args[1], "--help"};  // lockstep help run
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "validate") return lockstep::cli::RunValidate(args, std::cout, std::cerr);
  if (command == "convert") return lockstep::cli::RunConvert(args, std::cout, std::cerr);
  if (command == "local" || command == "run") {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string path = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
    if (command == "run") return lockstep::cli::RunRun(args, path, std::cout, std::cerr);
    return lockstep::cli::RunLocal(args, path, std::cout, std::cerr);
  }
  if (command == "version") {
    if (!args.empty() && args[0] != "--help" && args[0] != "-h") {
      std::cerr << "lockstep version: unexpected argument \"" << args[0] << "\"\n";
      return 2;
    }
    std::cout << "lockstep " << LOCKSTEP_VERSION << "\n";
    return 0;
  }
  std::cerr << "lockstep: unknown command \"" << command << "\"\n" << kUsage;
  return 1;
}
