#include "trainer/graph/testing/torch_oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "trainer/testing/python_peer.h"

namespace lockstep::trainer::graph::testing {

absl::StatusOr<nlohmann::json> RunTorchOracle(const std::string& script,
                                              const std::string& case_name) {
  return lockstep::trainer::testing::RunPythonPeer(script, {case_name});
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
