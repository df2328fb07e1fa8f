#include "trainer/strategy/engine.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/kernels/cuda/gpu_available.h"
#include "trainer/model/gpu_support.h"
#include "trainer/model/graph_model.h"
#include "trainer/strategy/buckets.h"
#include "trainer/strategy/session.h"

namespace lockstep::trainer {
namespace {

class CpuEngine final : public Engine {
 public:
  CpuEngine(std::unique_ptr<Model> model, std::unique_ptr<Optimizer> opt, comm::Collective* comm,
            int64_t eval_batch)
      : model_(std::move(model)), opt_(std::move(opt)), eval_batch_(eval_batch) {
    opt_->Init(model_->Params());
    if (comm != nullptr) reducer_.emplace(model_->Grads(), comm);
  }
  std::string Describe() const override {
    const std::string kernels = absl::StrCat("kernels on ", cpu::CpuThreading());
    return reducer_
               ? absl::StrCat("CPU, ", reducer_->buckets().size(), " gradient bucket(s), ", kernels)
               : absl::StrCat("CPU, ", kernels);
  }
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return *opt_; }
  absl::Status Load(bool) override { return absl::OkStatus(); }
  absl::Status Store() override { return absl::OkStatus(); }
  absl::StatusOr<StepResult> TrainStep(const Batch& b) override {
    StepResult r =
        !reducer_ ? model_->TrainStep(b) : model_->TrainStep(b, [&](size_t first, size_t count) {
          reducer_->Ready(first, count);
        });
    if (std::string bad = model_->TakeInputError(); !bad.empty()) {
      return absl::DataLossError("a batch the model cannot take: " + bad);
    }
    return r;
  }
  absl::Status FinishGradients(absl::Duration timeout) override {
    return reducer_ ? reducer_->Finish(timeout) : absl::OkStatus();
  }
  absl::Status GradientsToHost() override { return absl::OkStatus(); }
  absl::StatusOr<bool> Apply(float lr) override {
    opt_->set_learning_rate(lr);
    opt_->Step(model_->Params(), model_->Grads());
    return true;
  }
  absl::StatusOr<Evaluation> Evaluate(const Dataset& test) override {
    return trainer::Evaluate(model_.get(), test, eval_batch_);
  }
  absl::Status Rebind(comm::Collective* comm) override {
    reducer_.reset();
    if (comm != nullptr) reducer_.emplace(model_->Grads(), comm);
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  int64_t eval_batch_;
  std::optional<BucketReducer> reducer_;
};

}  // namespace

absl::Status GpuSignatureSupported(const GraphModel& g) {
  const std::vector<ModelInput> in = g.inputs();
  const std::vector<ModelOutput> out = g.outputs();
  if (in.size() != 1 || out.size() != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("the GPU engine trains one-input, one-output models yet; this one has ",
                     in.size(), " inputs and ", out.size(), " outputs"));
  }
  const LossKind k = out[0].loss.kind;
  const bool classes = k == LossKind::kSparseCategoricalCrossentropy ||
                       k == LossKind::kCategoricalCrossentropy ||
                       (k == LossKind::kBinaryCrossentropy && out[0].shape == Shape{1});
  if (!classes || out[0].shape.size() != 1) {
    return absl::FailedPreconditionError(
        "the GPU engine trains on one class label per example yet; output '" + out[0].name + "' " +
        ShapeString(out[0].shape) + " trains with " + graph::LossName(out[0].loss));
  }
  return absl::OkStatus();
}

absl::StatusOr<Placement> PlaceReplicas(const TrainerConfig& c) {
  cuda::GpuCountResult n =
      c.device == Device::kCpu ? cuda::GpuCountResult{0, "--device cpu"} : cuda::GpuCount();
  if (c.device == Device::kGpu && n.count == 0) {
    return absl::FailedPreconditionError(absl::StrCat("--device gpu: ", n.why_none));
  }
  Placement p{.gpu = n.count > 0, .gpus = n.count};
  if (p.gpu) {
    // A model runs on the GPU when every layer it calls has a GPU op.
    absl::StatusOr<std::unique_ptr<Model>> m = BuildConfiguredModel(c);
    if (!m.ok()) return m.status();
    auto* g = dynamic_cast<GraphModel*>(m->get());
    absl::Status s = g != nullptr ? GpuSupported(g->graph()) : absl::OkStatus();
    if (s.ok() && g != nullptr) s = GpuSignatureSupported(*g);
    if (!s.ok()) {
      if (c.device == Device::kGpu) {
        return absl::FailedPreconditionError(
            absl::StrCat("--device gpu: ", s.message(), "; use --device cpu"));
      }
      common::LogInfo("trainer", "the model trains on the CPU: ", s.message());
      n.why_none = std::string(s.message());
      p = Placement{};
    }
  }
  if (p.gpu && !c.precision_from_flag && c.precision == Precision::kFloat32 &&
      c.model_precision != Precision::kFloat32) {
    p.precision = c.model_precision;
  } else if (!p.gpu && c.model_precision != Precision::kFloat32 && !c.precision_from_flag) {
    common::LogInfo("trainer", "the model's dtype policy ", PrecisionName(c.model_precision),
                    " needs a GPU; it trains in float32 on the CPU");
  }
  const Precision precision = p.precision.value_or(c.precision);
  if (!p.gpu && c.precision != Precision::kFloat32) {
    return absl::FailedPreconditionError(absl::StrCat("--precision ", PrecisionName(c.precision),
                                                      " needs a GPU; the replicas run on the CPU (",
                                                      n.why_none, ")"));
  }
  if (precision == Precision::kMixedFloat16 && VariablesOnHost(c.strategy)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--precision mixed_float16 needs the optimizer on the GPU (dynamic loss scaling skips "
        "overflowing steps there); ",
        StrategyName(c.strategy), " updates variables on the host: use mixed_bfloat16"));
  }
  return p;
}

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const TrainerConfig& c,
                                                   const Placement& placement, int device,
                                                   comm::Collective* comm) {
  if (placement.gpu) {
    if (!placement.precision) return MakeGpuEngine(c, device, comm);
    TrainerConfig gc = c;
    gc.precision = *placement.precision;
    return MakeGpuEngine(gc, device, comm);
  }
  absl::StatusOr<std::unique_ptr<Model>> model = MakeModel(c);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      MakeOptimizer(c.optimizer, c.learning_rate, c.momentum, c.keras_optimizer);
  if (!opt.ok()) return opt.status();
  return std::make_unique<CpuEngine>(std::move(*model), std::move(*opt), comm, EvalBatchSize(c));
}

#ifndef LOCKSTEP_HAVE_CUDA
absl::StatusOr<std::unique_ptr<Engine>> MakeGpuEngine(const TrainerConfig&, int,
                                                      comm::Collective*) {
  return absl::UnimplementedError("this lockstep-trainer was built without CUDA");
}
#endif

}  // namespace lockstep::trainer
