#pragma once
// Where a test finds the source tree's files at run time: $LOCKSTEP_SOURCE_DIR when set (a test
// program run away from the tree it was built from, as the GPU bundle's are), else that tree
// (the LOCKSTEP_SOURCE_DIR the build defines). The shared corpora: $LOCKSTEP_SHARED_DIR when
// set, else the `shared` folder beside the source tree.
// Thread-safety: reads the environment only.

#include <cstdlib>
#include <filesystem>
#include <string>

namespace lockstep::trainer::testing {

inline std::filesystem::path SourceDir() {
  const char* env = std::getenv("LOCKSTEP_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                        : std::filesystem::path(LOCKSTEP_SOURCE_DIR);
}

// A file of the source tree by its path from the root ("examples/mwm.yaml").
inline std::string SourcePath(const std::string& rel) { return (SourceDir() / rel).string(); }

inline std::filesystem::path SharedDir() {
  const char* env = std::getenv("LOCKSTEP_SHARED_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                        : SourceDir() / ".." / "shared";
}

}  // namespace lockstep::trainer::testing
