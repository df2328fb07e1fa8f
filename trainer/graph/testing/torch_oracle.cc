#include "trainer/graph/testing/torch_oracle.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace lockstep::trainer::graph::testing {

#ifndef LOCKSTEP_SOURCE_DIR
#define LOCKSTEP_SOURCE_DIR "."
#endif

absl::StatusOr<nlohmann::json> RunTorchOracle(const std::string& script,
                                              const std::string& case_name) {
  const std::string python = "/usr/bin/python3";
  if (std::FILE* f = std::fopen(python.c_str(), "r"); f == nullptr) {
    return absl::UnavailableError("no " + python);
  } else {
    std::fclose(f);
  }
  const std::string cmd =
      python + " " + LOCKSTEP_SOURCE_DIR + "/" + script + " " + case_name + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::UnavailableError("cannot run " + cmd);
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) return absl::UnavailableError("PyTorch is not installed: " + out);
  if (code != 0) return absl::InternalError(cmd + " exited " + std::to_string(code) + ": " + out);
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return absl::InternalError(cmd + " printed no JSON: " + out.substr(0, 500));
  return j;
}

Tensor TensorFromJson(const nlohmann::json& j) {
  return Tensor(j.at("shape").get<Shape>(), j.at("data").get<std::vector<float>>());
}

double MaxRelativeError(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) /
                                std::max(1.0, std::abs(static_cast<double>(b[i]))));
  }
  return worst;
}

}  // namespace lockstep::trainer::graph::testing
