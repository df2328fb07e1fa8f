#pragma once
// Model: what a replica trains. Two kinds: the built-in models (SequentialModel below: a
// sequence of layers with a softmax cross-entropy head, NCHW, which the GPU engine mirrors),
// and graph models built from a Keras model file (GraphModel, trainer/model/graph_model.h,
// which DeviceGraph mirrors on a GPU where gpu_support.h takes its layers). The built-in ones:
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
  virtual ~Model() = default;

  // Forward, loss, and (when training) backward: fills every parameter's gradient. `x` is a
  // batch of examples (any shape with the batch first and the model's example size), `labels`
  // their classes. `grads_ready`, when given, is called as backward goes, once per layer with
  // parameters, with the range [first, first + count) of Params() indices whose gradients are
  // now final (so they can be reduced while backward goes on); the ranges come last layer
  // first.
  using GradsReady = std::function<void(size_t first, size_t count)>;
  virtual cpu::XentResult TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                                    const GradsReady& grads_ready = nullptr) = 0;
  // Forward only (dropout off): loss and correct predictions.
  virtual cpu::XentResult Evaluate(const Tensor& x, const std::vector<int32_t>& labels) = 0;

  // Parameters and gradients in a fixed order (layer by layer, weight then bias).
  virtual std::vector<Tensor*> Params() = 0;
  virtual std::vector<Tensor*> Grads() = 0;
  // Weights that are not trained but kept (batch normalisation's moving statistics): saved in
  // checkpoints after the parameters.
  virtual std::vector<Tensor*> State() { return {}; }
  // One example's shape and the number of classes the model predicts.
  virtual Shape example_shape() const = 0;
  virtual int64_t classes() const = 0;
  // The vocabulary when the model reads token ids (its input feeds an Embedding), else 0.
  virtual int64_t vocabulary() const { return 0; }
  // What the last step could not compute on (a token id outside an Embedding's range), once;
  // "" when nothing.
  virtual std::string TakeInputError() { return ""; }
  int64_t NumParams();
};

class SequentialModel final : public Model {
 public:
  explicit SequentialModel(std::vector<std::unique_ptr<Layer>> layers, Shape example)
      : layers_(std::move(layers)), example_(std::move(example)) {}

  cpu::XentResult TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                            const GradsReady& grads_ready = nullptr) override;
  cpu::XentResult Evaluate(const Tensor& x, const std::vector<int32_t>& labels) override;
  std::vector<Tensor*> Params() override;
  std::vector<Tensor*> Grads() override;
  Shape example_shape() const override { return example_; }
  int64_t classes() const override { return 10; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  Shape example_;
  Tensor dlogits_;
};

// The built-in model names.
bool IsBuiltinModel(const std::string& name);
// "mlp", "cnn" or "mlp-large"; InvalidArgument naming the known models otherwise.
absl::StatusOr<std::unique_ptr<SequentialModel>> BuildBuiltinModel(const std::string& name,
                                                                   uint64_t seed);
// A built-in name, or the path of a Keras model file (graph_model.cc): InvalidArgument names
// what the model file holds that the engine cannot build.
absl::StatusOr<std::unique_ptr<Model>> BuildModel(const std::string& name_or_path, uint64_t seed);

}  // namespace lockstep::trainer
