#pragma once
// GraphModel: a Keras model file (trainer/keras/model_loader.h) as the model a replica trains,
// with any number of inputs and outputs of any fixed shape. Each output's loss is, in order:
// --loss (every output), the file's compile loss (one for all, a list by position, or a dict by
// output name, with loss_weights the same way), or inferred from the output's activation (Keras
// 2's to_json never stores one): softmax -> sparse categorical cross-entropy (one-hot targets
// are taken as their class ids), sigmoid -> binary cross-entropy, a linear output of k > 1
// units -> sparse categorical cross-entropy from logits (a classifier compiled with
// from_logits=True, which to_json does not keep), anything else (one unit, an image, a
// sequence; linear or another activation) -> mean squared error. loss_reasons() says which rule
// chose each.
// Thread-safety: one thread per model.

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/loss.h"
#include "trainer/keras/model_loader.h"
#include "trainer/model/model.h"

namespace lockstep::trainer {

class GraphModel final : public Model {
 public:
  // A built-in model's name (builtin_models.h) or a Keras model file's path. `loss` is --loss
  // (a Keras loss name or its JSON object; "" for none).
  static absl::StatusOr<std::unique_ptr<GraphModel>> Load(const std::string& name_or_path,
                                                          uint64_t seed,
                                                          const std::string& loss = "",
                                                          int64_t open_axis_size = 0);
  static absl::StatusOr<std::unique_ptr<GraphModel>> FromKeras(keras::KerasModel m, uint64_t seed,
                                                               const std::string& loss = "");

  StepResult TrainStep(const Dataset& batch, const GradsReady& grads_ready = nullptr) override;
  StepResult Evaluate(const Dataset& batch) override;
  std::vector<Tensor*> Params() override { return graph().Params(); }
  std::vector<Tensor*> Grads() override { return graph().Grads(); }
  std::vector<Tensor*> State() override;
  std::vector<ModelInput> inputs() const override { return inputs_; }
  std::vector<ModelOutput> outputs() const override { return outputs_; }
  // Per output: where its loss came from ("--loss", "the compile config", or the inference
  // rule that chose it).
  const std::vector<std::string>& loss_reasons() const { return loss_reasons_; }
  // The first input the last step could not compute on (an id outside an Embedding), or "".
  std::string TakeInputError() override;

  // The first output's loss targets for class labels (the GPU engine's one-output path):
  // one-hot rows [n, classes] (categorical), else the ids as floats ([n] sparse, [n, 1]
  // binary).
  void Targets(const std::vector<int32_t>& labels, Tensor* out) const;

  // Roughly what a training step at `batch` examples holds: the weights with their gradients
  // and two optimizer slots, and every tensor the graph makes with its gradient.
  struct StepMemory {
    double weights = 0, activations = 0;
    double total() const { return weights + activations; }
  };
  StepMemory TrainingStepMemory(int64_t batch);

  graph::Graph& graph() { return *m_.graph; }
  const Loss& loss() const { return outputs_[0].loss; }
  const keras::KerasModel& keras() const { return m_; }
  keras::KerasModel& keras() { return m_; }

 private:
  GraphModel(keras::KerasModel m, std::vector<ModelInput> inputs, std::vector<ModelOutput> outputs,
             std::vector<std::string> reasons, uint64_t seed);
  StepResult Run(const Dataset& batch, bool training, const GradsReady* ready);

  keras::KerasModel m_;
  std::vector<ModelInput> inputs_;
  std::vector<ModelOutput> outputs_;
  std::vector<std::string> loss_reasons_;
  std::mt19937_64 rng_;
  std::string error_;
  std::vector<Tensor> x_, dy_;
};

}  // namespace lockstep::trainer
