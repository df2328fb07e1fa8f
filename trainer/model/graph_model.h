#pragma once
// GraphModel: a Keras model file (trainer/keras/model_loader.h) as the model a replica trains,
// on classification data (examples and class ids). The loss is the file's compile loss when it
// has one, else sparse categorical cross-entropy on probabilities when the output ends in
// softmax and on logits otherwise; a one-unit sigmoid output takes binary cross-entropy. A
// model the trainer's data cannot feed (several inputs or outputs, an axis left open, an
// output per time step, a regression loss) is refused at load with the reason.
// Thread-safety: one thread per model.

#include <memory>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/graph/loss.h"
#include "trainer/keras/model_loader.h"
#include "trainer/model/model.h"

namespace lockstep::trainer {

class GraphModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<GraphModel>> Load(const std::string& path, uint64_t seed);
  static absl::StatusOr<std::unique_ptr<GraphModel>> FromKeras(keras::KerasModel m, uint64_t seed);

  cpu::XentResult TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                            const GradsReady& grads_ready = nullptr) override;
  cpu::XentResult Evaluate(const Tensor& x, const std::vector<int32_t>& labels) override;
  std::vector<Tensor*> Params() override { return graph().Params(); }
  std::vector<Tensor*> Grads() override { return graph().Grads(); }
  std::vector<Tensor*> State() override;
  Shape example_shape() const override;
  int64_t classes() const override;
  int64_t vocabulary() const override;
  // The first input the last step could not compute on (an id outside an Embedding), or "".
  std::string TakeInputError() override;

  // The loss's targets for class labels: one-hot rows [n, classes] (categorical), else the ids
  // as floats ([n] sparse, [n, 1] binary).
  void Targets(const std::vector<int32_t>& labels, Tensor* out) const;

  graph::Graph& graph() { return *m_.graph; }
  const graph::Loss& loss() const { return loss_; }
  const keras::KerasModel& keras() const { return m_; }
  keras::KerasModel& keras() { return m_; }

 private:
  GraphModel(keras::KerasModel m, graph::Loss loss, uint64_t seed);
  cpu::XentResult Run(const Tensor& x, const std::vector<int32_t>& labels, bool training,
                      const GradsReady* ready);

  keras::KerasModel m_;
  graph::Loss loss_;
  std::mt19937_64 rng_;
  std::string error_;
  Tensor x_, targets_, dy_;
};

}  // namespace lockstep::trainer
