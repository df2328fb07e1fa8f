// What chart_test's files share: running lockstep-chart-render and reading what it rendered.
// Test-only; each function records a GoogleTest failure where the render itself failed.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "operator/api/manifest.h"

namespace lockstep::chart_test {

inline const std::string kChart = std::string(LOCKSTEP_SOURCE_DIR) + "/charts/lockstep";
inline const std::string kCustom =
    std::string(LOCKSTEP_SOURCE_DIR) + "/charts/tests/values-custom.yaml";

struct Rendered {
  int exit_code = -1;
  std::string out, err;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the renderer with `args` (shell words, already quoted where needed).
inline Rendered Render(const std::string& args) {
  namespace fs = std::filesystem;
  fs::path err = fs::temp_directory_path() / ("chart_test_err_" + std::to_string(::getpid()));
  std::string cmd = std::string(LOCKSTEP_CHART_RENDER) + " " + args + " 2>" + err.string();
  Rendered r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadFile(err.string());
  fs::remove(err);
  return r;
}

// A values file in the temp directory, removed with the object.
struct ValuesFile {
  explicit ValuesFile(const std::string& text)
      : path((std::filesystem::temp_directory_path() /
              ("chart_values_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
               ".yaml"))
                 .string()) {
    std::ofstream(path) << text;
  }
  ~ValuesFile() { std::filesystem::remove(path); }
  ValuesFile(const ValuesFile&) = delete;
  ValuesFile& operator=(const ValuesFile&) = delete;
  std::string path;
  static inline int counter = 0;
};

// The rendered objects; a failed render or unparsable output is a test failure.
inline std::vector<nlohmann::json> Objects(const std::string& args) {
  Rendered r = Render(args);
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
  absl::StatusOr<std::vector<nlohmann::json>> docs = api::ParseYamlDocuments(r.out);
  EXPECT_TRUE(docs.ok()) << docs.status();
  return docs.ok() ? *docs : std::vector<nlohmann::json>{};
}

inline const nlohmann::json* Find(const std::vector<nlohmann::json>& objs, const std::string& kind,
                                  const std::string& name = "") {
  for (const nlohmann::json& o : objs) {
    if (o.value("kind", "") == kind && (name.empty() || o["metadata"].value("name", "") == name)) {
      return &o;
    }
  }
  return nullptr;
}

}  // namespace lockstep::chart_test
