#pragma once
// Optimizers over a model's parameter list: SGD with (PyTorch-style) momentum and Adam. Their
// state (momentum buffers, Adam moments and step) is a list of tensors so checkpoints can save
// and restore it bit for bit.
// Thread-safety: one thread per optimizer.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/kernels/cpu/update.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // params[i] -= update from grads[i]; the lists are parallel and keep their order.
  virtual void Step(const std::vector<Tensor*>& params, const std::vector<Tensor*>& grads) = 0;
  virtual std::vector<Tensor*> State() = 0;  // empty until the first Step
  // Sizes the state for `params` (so a checkpoint can be loaded before the first Step).
  virtual void Init(const std::vector<Tensor*>& params) = 0;
  float learning_rate() const { return lr_; }
  void set_learning_rate(float lr) { lr_ = lr; }

  // For an engine that keeps the parameters elsewhere (a GPU's flat buffers) and runs the same
  // update there: BeginExternalStep advances the step count as Step does and returns this
  // step's rule and constants (the gradient scale left at 1) and the clipping to apply first.
  // Slot k of parameter i is Slots(k)[i], tensors that State() also lists, so a checkpoint
  // saves what the engine stores back into them. Init must have run.
  struct ExternalStep {
    UpdateParams u;
    float clipnorm = 0;         // per tensor (Keras's clipnorm)
    float global_clipnorm = 0;  // over all of them
  };
  virtual ExternalStep BeginExternalStep() = 0;
  virtual int SlotsPerParam() const = 0;
  virtual std::vector<Tensor*> Slots(int k) = 0;

 protected:
  explicit Optimizer(float lr) : lr_(lr) {}
  float lr_;
};

// v = momentum * v + g; p -= lr * v.
std::unique_ptr<Optimizer> MakeSgd(float lr, float momentum);
// Adam (Kingma & Ba) with bias correction; beta1 0.9, beta2 0.999, epsilon 1e-7.
std::unique_ptr<Optimizer> MakeAdam(float lr);

// The learning rate at `step` of `total`: `base` throughout ("constant"), or cosine decay
// from `base` to zero ("cosine"), or the Keras schedule of `keras_optimizer` (the JSON of a
// Keras optimizer a model file compiled with; see keras_optimizer.h), whose constant
// learning rate otherwise holds unless `schedule` came from a flag.
float ScheduledLearningRate(const std::string& schedule, float base, int64_t step, int64_t total);

// "sgd" or "adam" (the trainer's flags, PyTorch's update rules), or, when `keras_optimizer` is
// not empty, that Keras optimizer with Keras's rules; InvalidArgument otherwise.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const std::string& name, float lr,
                                                         float momentum,
                                                         const std::string& keras_optimizer = "");

// A run's learning rate per step, decided once: a Keras schedule, or ScheduledLearningRate.
class LearningRate {
 public:
  // InvalidArgument when `keras_optimizer` is not a Keras optimizer.
  static absl::StatusOr<LearningRate> Make(const std::string& schedule, float base,
                                           const std::string& keras_optimizer);
  float At(int64_t step, int64_t total) const;

 private:
  std::string schedule_;
  float base_ = 0;
  nlohmann::json keras_schedule_;  // a Keras LearningRateSchedule, or null
};

}  // namespace lockstep::trainer
