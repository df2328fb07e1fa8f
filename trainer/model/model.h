#pragma once
// Model: what a replica trains. Two kinds: the built-in models (SequentialModel below: a
// sequence of layers with a softmax cross-entropy head on logits, one class id per example,
// NCHW, which the GPU engine mirrors),
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
#include "trainer/data/dataset.h"
#include "trainer/graph/loss.h"
#include "trainer/kernels/cpu/softmax_xent.h"
#include "trainer/model/layer.h"

namespace lockstep::trainer {

// What a model takes and gives, per example: its inputs (with the vocabulary when one holds
// token ids) and its outputs (with the loss each is trained with), in order and by name.
struct ModelInput {
  std::string name;
  Shape shape;
  int64_t vocabulary = 0;  // > 0: token ids into an Embedding of this many rows
};
struct ModelOutput {
  std::string name;
  Shape shape;
  graph::Loss loss;
  float loss_weight = 1;
};
// The classes an output predicts: its last axis (2 for one unit, a binary classifier).
int64_t Classes(const ModelOutput& o);
// The target an output's loss takes per example: class ids (the output's shape without its
// last axis) for sparse categorical cross-entropy, else the output's shape.
Shape TargetShape(const ModelOutput& o);

// One step's (or one evaluation batch's) result: the loss (the mean over the batch, summed over
// the outputs with their loss weights, with regularisation), and the accuracy's counts: the
// predictions judged right of those judged (arg-max against the class for a cross-entropy,
// a 0.5 threshold for a binary one; a regression output is not judged).
struct StepResult {
  double loss = 0;
  int64_t correct = 0;
  int64_t judged = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // Forward, loss, and (when training) backward: fills every parameter's gradient. `batch`
  // holds one tensor per input and one target per output (the batch first in each).
  // `grads_ready`, when given, is called as backward goes, once per layer with parameters,
  // with the range [first, first + count) of Params() indices whose gradients are now final (so
  // they can be reduced while backward goes on); the ranges come last layer first.
  using GradsReady = std::function<void(size_t first, size_t count)>;
  virtual StepResult TrainStep(const Dataset& batch, const GradsReady& grads_ready = nullptr) = 0;
  // Forward only (dropout off): loss and correct predictions.
  virtual StepResult Evaluate(const Dataset& batch) = 0;

  // Parameters and gradients in a fixed order (layer by layer, weight then bias).
  virtual std::vector<Tensor*> Params() = 0;
  virtual std::vector<Tensor*> Grads() = 0;
  // Weights that are not trained but kept (batch normalisation's moving statistics): saved in
  // checkpoints after the parameters.
  virtual std::vector<Tensor*> State() { return {}; }
  virtual std::vector<ModelInput> inputs() const = 0;
  virtual std::vector<ModelOutput> outputs() const = 0;
  // The first input's shape per example, the classes of the first output (2 for one sigmoid
  // unit), and the first input's vocabulary when it holds token ids (else 0).
  Shape example_shape() const { return inputs()[0].shape; }
  int64_t classes() const;
  int64_t vocabulary() const { return inputs()[0].vocabulary; }
  // What the last step could not compute on (a token id outside an Embedding's range), once;
  // "" when nothing.
  virtual std::string TakeInputError() { return ""; }
  int64_t NumParams();
};

class SequentialModel final : public Model {
 public:
  explicit SequentialModel(std::vector<std::unique_ptr<Layer>> layers, Shape example)
      : layers_(std::move(layers)), example_(std::move(example)) {}

  StepResult TrainStep(const Dataset& batch, const GradsReady& grads_ready = nullptr) override;
  StepResult Evaluate(const Dataset& batch) override;
  std::vector<Tensor*> Params() override;
  std::vector<Tensor*> Grads() override;
  std::vector<ModelInput> inputs() const override { return {{"input", example_}}; }
  std::vector<ModelOutput> outputs() const override { return Outputs(); }
  // Every built-in model's: ten classes, softmax cross-entropy on logits.
  static std::vector<ModelOutput> Outputs();
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
// `loss` is --loss (graph_model.h); `open_axis_size` the size given to the input axes a model
// file leaves open (keras/model_loader.h's LoadOptions).
absl::StatusOr<std::unique_ptr<Model>> BuildModel(const std::string& name_or_path, uint64_t seed,
                                                  const std::string& loss = "",
                                                  int64_t open_axis_size = 0);

}  // namespace lockstep::trainer
