#pragma once
// PyTorch as an independent oracle for the layer tests: runs a test-only Python script with
// Debian's python3-torch (/usr/bin/python3) and returns the JSON it prints. A script takes a
// case name, draws inputs and weights (weights in Keras's layouts), computes PyTorch's forward
// outputs and gradients, and prints all of it; the C++ test builds the same layer from a Keras
// config, loads the weights, and compares. Unavailable when python3 or torch is missing, so a
// test can skip with that message.
// Thread-safety: test code.

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph::testing {

// `script` is relative to the source tree (LOCKSTEP_SOURCE_DIR).
absl::StatusOr<nlohmann::json> RunTorchOracle(const std::string& script,
                                              const std::string& case_name);

// {"shape": [...], "data": [...]} -> Tensor.
Tensor TensorFromJson(const nlohmann::json& j);

// Largest |a - b| / max(1, |b|) over the elements; shapes must agree (else infinity).
double MaxRelativeError(const Tensor& a, const Tensor& b);

}  // namespace lockstep::trainer::graph::testing
