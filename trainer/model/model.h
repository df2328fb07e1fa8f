#pragma once
// Model: a sequence of layers with a softmax cross-entropy head, and the two named models:
//   mlp: Flatten, Dense 784-256, ReLU, Dense 256-256, ReLU, Dense 256-10
//   cnn: Conv 32 3x3, ReLU, MaxPool 2, Conv 64 3x3, ReLU, MaxPool 2, Flatten, Dense 1600-128,
//        ReLU, Dense 128-10
//   mlp-large: Flatten, Dense 784-8192, ReLU, Dense 8192-8192, ReLU, Dense 8192-8192, ReLU,
//        Dense 8192-10 (141M parameters; the GPU benchmark's GEMM-bound model)
// Weights are drawn from `seed`, so two models built with one seed are identical.
// Thread-safety: one thread per model.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/kernels/cpu/softmax_xent.h"
#include "trainer/model/layer.h"

namespace lockstep::trainer {

class Model {
 public:
  explicit Model(std::vector<std::unique_ptr<Layer>> layers) : layers_(std::move(layers)) {}

  // Forward, loss, and (when training) backward: fills every parameter's gradient.
  // `grads_ready`, when given, is called as backward goes, once per layer with parameters,
  // with the range [first, first + count) of Params() indices whose gradients are now final
  // (so they can be reduced while backward goes on); the ranges come last layer first.
  using GradsReady = std::function<void(size_t first, size_t count)>;
  cpu::XentResult TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                            const GradsReady& grads_ready = nullptr);
  // Forward only (dropout off): loss and correct predictions.
  cpu::XentResult Evaluate(const Tensor& x, const std::vector<int32_t>& labels);

  // Parameters and gradients in a fixed order (layer by layer, weight then bias).
  std::vector<Tensor*> Params();
  std::vector<Tensor*> Grads();
  int64_t NumParams();
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  Tensor dlogits_;
};

// "mlp" or "cnn"; InvalidArgument naming the known models otherwise.
absl::StatusOr<std::unique_ptr<Model>> BuildModel(const std::string& name, uint64_t seed);

}  // namespace lockstep::trainer
