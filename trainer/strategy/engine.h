#pragma once
// Engine: what one replica computes on. The CPU engine is the host Model and Optimizer; the GPU
// engine is the model on one GPU (its DeviceGraph, model/device_graph.h) with the
// host optimizer's rule as one fused kernel, mixed precision and dynamic loss scaling. Both keep a
// host Model and Optimizer as the record the training loop restores checkpoints into, broadcasts,
// and saves from: Load() copies that record to the device, Store() copies the device's state back
// (both do nothing on the CPU).
//
// A step is TrainStep (forward, backward; with a collective, the gradient average is issued:
// in buckets while backward runs on the CPU, in one all-reduce of the flat gradient buffer on
// the GPU, straight from device memory when the backend takes device buffers, as NCCL does,
// else staged through the host), FinishGradients (waits for it), then Apply (the optimizer;
// false when an fp16 step overflowed and was skipped). CentralStorage instead reads the
// averaged gradients on the host (GradientsToHost) and updates the host variables itself.
// Thread-safety: one thread per engine (the replica's).

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/comm/collective.h"
#include "trainer/config/trainer_config.h"
#include "trainer/data/batcher.h"
#include "trainer/optim/loss_scale.h"
#include "trainer/strategy/session.h"

namespace lockstep::trainer {

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string Describe() const = 0;  // "CPU" or "GPU 0 (NVIDIA H200), mixed_bfloat16"
  virtual Model& model() = 0;
  virtual Optimizer& optimizer() = 0;
  virtual absl::Status Load(bool with_optimizer_state = true) = 0;
  virtual absl::Status Store() = 0;
  virtual absl::StatusOr<StepResult> TrainStep(const Batch& b) = 0;
  virtual absl::Status FinishGradients(absl::Duration timeout) = 0;
  virtual absl::Status GradientsToHost() = 0;
  virtual absl::StatusOr<bool> Apply(float learning_rate) = 0;
  // The test set, EvalBatchSize examples at a time.
  virtual absl::StatusOr<Evaluation> Evaluate(const Dataset& test) = 0;
  // Steps skipped by the loss scaler (fp16 overflow), and its scale now (1 when none).
  virtual int64_t skipped_steps() const { return 0; }
  virtual float loss_scale() const { return 1.0f; }
  // The loss scaler's whole state, which a replacement replica takes over (in-place recovery).
  virtual LossScaler::State loss_scale_state() const { return {}; }
  virtual void set_loss_scale_state(const LossScaler::State&) {}
  // After the group re-formed (in-place recovery): the collective to reduce over from now on.
  // Gradients in flight on the old one are abandoned.
  virtual absl::Status Rebind(comm::Collective* comm) = 0;
};

// Where replicas run: the CPU, or `gpus` GPUs (--device and the GPUs this process sees).
struct Placement {
  bool gpu = false;
  int gpus = 0;
  // Set when the model file's dtype policy decides the precision (no --precision, replicas
  // on GPUs); the engines then use it instead of the config's.
  std::optional<Precision> precision;
};
// A Keras model file with a layer that has no GPU op (gpu_support.h) runs on the CPU under
// --device auto (logged, naming the layer) and is FailedPrecondition under --device gpu.
// FailedPrecondition for --device gpu without a GPU, or mixed precision where the replicas
// would run on the CPU; InvalidArgument for mixed_float16 with a strategy that updates
// variables on the host (CentralStorage, ParameterServer), where no loss scaler can skip.
absl::StatusOr<Placement> PlaceReplicas(const TrainerConfig& c);

// An engine for one replica: on the CPU, or on GPU `device` when `placement.gpu`. `comm` may
// be null (one replica).
absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const TrainerConfig& c,
                                                   const Placement& placement, int device,
                                                   comm::Collective* comm);

// OK when the GPU engine takes the model's inputs and outputs: one input, and one output trained
// on a class label per example (its device graph computes the loss of one target); else
// FailedPrecondition naming what it has. Such a model trains on the CPU under --device auto.
class GraphModel;
absl::Status GpuSignatureSupported(const GraphModel& g);

// The GPU engine (gpu_engine.cc; Unimplemented in a build without CUDA).
absl::StatusOr<std::unique_ptr<Engine>> MakeGpuEngine(const TrainerConfig& c, int device,
                                                      comm::Collective* comm);

}  // namespace lockstep::trainer
