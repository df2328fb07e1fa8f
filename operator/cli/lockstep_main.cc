// lockstep: the Lockstep command-line tool.

#include <iostream>
#include <string>
#include <vector>

#include "operator/cli/validate_command.h"

namespace {

constexpr const char* kUsage = R"(usage: lockstep COMMAND [ARGS]

commands:
  validate FILE...   check the TrainingJobs in manifest files (YAML or JSON) without a cluster
  version            print the version
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "validate") return lockstep::cli::RunValidate(args, std::cout, std::cerr);
  if (command == "version") {
    std::cout << "lockstep " << LOCKSTEP_VERSION << "\n";
    return 0;
  }
  std::cerr << "lockstep: unknown command \"" << command << "\"\n" << kUsage;
  return 1;
}
