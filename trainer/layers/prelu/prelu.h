#pragma once
// PReLU, Keras's keras.layers.PReLU: y = x where x >= 0, alpha * x elsewhere, with a learned
// alpha per element of an example (Keras's layout: the input's shape without the batch), shared
// (of size 1) along `shared_axes`. The layer family: this header, prelu.cc (the CPU layer, its
// Keras config, its ONNX form, its registration), prelu.cu and prelu_gpu.cc (the GPU kernels
// and device op) and prelu_test.cc.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/graph/initializer.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct PReluOptions {
  Initializer alpha_initializer = Zeros();
  float alpha_l1 = 0, alpha_l2 = 0;  // alpha_regularizer
  std::vector<int64_t> shared_axes;  // axes of the input, the batch being 0 (as Keras counts)
};

std::unique_ptr<Layer> MakePRelu(std::string name, PReluOptions o);

}  // namespace lockstep::trainer::graph
