#pragma once
// Independent peers for the tests: a test-only Python script run by Debian's /usr/bin/python3
// (PyTorch as a numerical oracle, readers and writers of the file formats written from their
// specifications), whose stdout is JSON. A script exits 77 when a module it needs is missing,
// and the test then skips with the script's message.
// Thread-safety: test code.

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lockstep::trainer::testing {

// Runs `script` (relative to the source tree, LOCKSTEP_SOURCE_DIR) with `args` (each passed as
// one shell-quoted argument). Unavailable when python3 or a module is missing; Internal when
// the script fails or prints no JSON.
absl::StatusOr<nlohmann::json> RunPythonPeer(const std::string& script,
                                             const std::vector<std::string>& args);

}  // namespace lockstep::trainer::testing
