#pragma once
// Model: what a replica trains: a graph model built from a Keras model config (GraphModel,
// trainer/model/graph_model.h, which DeviceGraph mirrors on a GPU where gpu_support.h takes its
// layers), a built-in model's (builtin_models.h) or the user's file.
// Thread-safety: one thread per model.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/dataset.h"
#include "trainer/graph/loss.h"

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
  Loss loss;
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

// A built-in name, or the path of a Keras model file (graph_model.cc): InvalidArgument names
// what the model file holds that the engine cannot build.
// `loss` is --loss (graph_model.h); `open_axis_size` the size given to the input axes a model
// file leaves open (keras/model_loader.h's LoadOptions).
absl::StatusOr<std::unique_ptr<Model>> BuildModel(const std::string& name_or_path, uint64_t seed,
                                                  const std::string& loss = "",
                                                  int64_t open_axis_size = 0);

}  // namespace lockstep::trainer
