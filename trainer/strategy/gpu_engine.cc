// The GPU engine (engine.h): the model's DeviceGraph, the host optimizer's rule as one fused
// kernel over the flat buffers, the loss scaler, and the gradient average over the replica's
// collective.
#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/optimizer_kernels.h"
#include "trainer/model/device_graph.h"
#include "trainer/model/graph_model.h"
#include "trainer/optim/loss_scale.h"
#include "trainer/strategy/buckets.h"
#include "trainer/strategy/engine.h"
#include "trainer/strategy/session.h"

namespace lockstep::trainer {
namespace {

using cuda::DType;

// The class labels of a one-output batch (GpuSignatureSupported): class ids, or one-hot rows'
// arg-max (the device graph makes its loss's targets from labels).
std::vector<int32_t> Labels(const Tensor& targets) {
  const int64_t each = ExampleSize(targets);
  if (each <= 1) return ClassIds(targets);
  std::vector<int32_t> out(static_cast<size_t>(targets.dim(0)));
  for (size_t i = 0; i < out.size(); ++i) {
    const float* row = targets.data() + static_cast<int64_t>(i) * each;
    out[i] = static_cast<int32_t>(std::max_element(row, row + each) - row);
  }
  return out;
}

class GpuEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const TrainerConfig& c, int device,
                                                        comm::Collective* comm) {
    std::unique_ptr<GpuEngine> e(new GpuEngine);
    e->comm_ = comm;
    e->precision_ = c.precision;
    e->eval_batch_ = EvalBatchSize(c);
    const DType compute = c.precision == Precision::kMixedFloat16    ? DType::kF16
                          : c.precision == Precision::kMixedBfloat16 ? DType::kBF16
                                                                     : DType::kF32;
    e->scaler_ = compute == DType::kF16 ? LossScaler() : LossScaler::Fixed(1.0f);
    absl::StatusOr<std::unique_ptr<cuda::GpuContext>> ctx =
        cuda::GpuContext::Create(device, {.tf32 = c.tf32});
    if (!ctx.ok()) return ctx.status();
    e->ctx_ = std::move(*ctx);
    absl::StatusOr<std::unique_ptr<Model>> model = MakeModel(c);
    if (!model.ok()) return model.status();
    e->model_ = std::move(*model);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        MakeOptimizer(c.optimizer, c.learning_rate, c.momentum, c.keras_optimizer);
    if (!opt.ok()) return opt.status();
    e->opt_ = std::move(*opt);
    e->opt_->Init(e->model_->Params());
    absl::StatusOr<std::unique_ptr<DeviceGraph>> dg =
        DeviceGraph::Create(e->ctx_.get(), dynamic_cast<GraphModel&>(*e->model_), compute, c.seed);
    if (!dg.ok()) return dg.status();
    e->net_ = std::move(*dg);
    DeviceParams& w = e->net_->weights();
    const Shape flat{std::max<int64_t>(w.trainable_size(), 1)};
    e->slots_.resize(static_cast<size_t>(e->opt_->SlotsPerParam()));
    for (cuda::DeviceTensor& t : e->slots_) {
      if (absl::Status s = t.Resize(e->ctx_.get(), flat, DType::kF32); !s.ok()) return s;
      LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(t.data(), 0, t.bytes(), e->ctx_->stream()));
    }
    absl::StatusOr<cuda::ClipScales> clip = cuda::ClipScales::Make(
        e->ctx_.get(),
        {w.offsets().begin(), w.offsets().begin() + static_cast<long>(w.trainable_sizes().size())},
        w.trainable_sizes(), w.trainable_size());
    if (!clip.ok()) return clip.status();
    e->clip_.emplace(std::move(*clip));
    if (comm != nullptr && !comm->device_buffers()) {
      e->reducer_.emplace(e->model_->Grads(), comm);
    }
    if (absl::Status s = e->Load(true); !s.ok()) return s;
    return std::unique_ptr<Engine>(std::move(e));
  }

  std::string Describe() const override {
    const cuda::DeviceInfo& d = ctx_->info();
    std::string out = absl::StrCat("GPU ", d.index, " (", d.name, "), ", PrecisionName(precision_),
                                   ctx_->tf32() ? ", TF32 on" : ", TF32 off");
    if (comm_ != nullptr) {
      absl::StrAppend(&out, comm_->device_buffers() ? ", gradients reduced in device memory"
                                                    : ", gradients staged through the host");
    }
    return out;
  }
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return *opt_; }

  // Host to device: the trained weights, and with the optimizer state also the kept weights
  // (moving statistics) and the optimizer's slots.
  absl::Status Load(bool with_optimizer_state) override {
    if (absl::Status s = ctx_->Activate(); !s.ok()) return s;
    DeviceParams& w = net_->weights();
    if (!with_optimizer_state) return w.LoadFlat(model_->Params(), w.params());
    if (absl::Status s = w.Load(); !s.ok()) return s;
    if (absl::Status s = net_->Reloaded(); !s.ok()) return s;
    for (size_t k = 0; k < slots_.size(); ++k) {
      if (absl::Status s = w.LoadFlat(opt_->Slots(static_cast<int>(k)), slots_[k].as<float>());
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Store() override {
    DeviceParams& w = net_->weights();
    if (absl::Status s = w.Store(); !s.ok()) return s;
    for (size_t k = 0; k < slots_.size(); ++k) {
      if (absl::Status s = w.StoreFlat(slots_[k].as<float>(), opt_->Slots(static_cast<int>(k)));
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<StepResult> TrainStep(const Batch& b) override {
    absl::StatusOr<cuda::LossResult> step =
        net_->TrainStep(b.inputs[0], Labels(b.targets[0]), scaler_.scale());
    if (!step.ok()) return step.status();
    const StepResult r{.loss = step->loss, .correct = step->correct, .judged = b.size()};
    grads_on_host_ = false;
    if (comm_ == nullptr) return r;
    if (comm_->device_buffers()) {
      // NCCL: one all-reduce of the flat gradients on the backend's stream, once backward
      // (queued on ours) has written them.
      if (absl::Status s = ctx_->Synchronize(); !s.ok()) return s;
      work_ = comm_->AllReduce(weights().grads(), weights().trainable_size());
    } else {
      if (absl::Status s = weights().StoreFlat(weights().grads(), model_->Grads()); !s.ok()) {
        return s;
      }
      reducer_->Ready(0, model_->Grads().size());
    }
    return r;
  }

  absl::Status FinishGradients(absl::Duration timeout) override {
    if (comm_ == nullptr) return absl::OkStatus();
    if (comm_->device_buffers()) {
      absl::Status s = work_->Wait(timeout);
      work_ = nullptr;
      return s;
    }
    // The host average (BucketReducer) goes back to the device for the update.
    if (absl::Status s = reducer_->Finish(timeout); !s.ok()) return s;
    grads_on_host_ = true;
    return weights().LoadFlat(model_->Grads(), weights().grads());
  }

  absl::Status GradientsToHost() override {
    if (grads_on_host_) return absl::OkStatus();
    grads_on_host_ = true;
    if (absl::Status s = weights().StoreFlat(weights().grads(), model_->Grads()); !s.ok()) {
      return s;
    }
    // Device-reduced gradients are sums, scaled by the loss scale: make them the average.
    const float factor = GradFactor();
    for (Tensor* g : model_->Grads()) {
      for (float& v : g->values()) v *= factor;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Apply(float lr) override {
    DeviceParams& w = weights();
    const float factor = GradFactor();
    if (precision_ == Precision::kMixedFloat16) {
      // Every replica holds the same reduced gradients, so all make the same choice.
      absl::StatusOr<bool> finite = cuda::AllFinite(ctx_.get(), w.grads(), w.trainable_size());
      if (!finite.ok()) return finite.status();
      if (!scaler_.Update(*finite)) return false;
    }
    // The host optimizer keeps the step count and this step's constants; the kernel applies
    // its rule to the flat buffers.
    opt_->set_learning_rate(lr);
    const Optimizer::ExternalStep x = opt_->BeginExternalStep();
    const bool clipping = x.clipnorm > 0 || x.global_clipnorm > 0;
    if (clipping) {
      if (absl::Status s =
              clip_->Compute(ctx_.get(), w.grads(), factor, x.clipnorm, x.global_clipnorm);
          !s.ok()) {
        return s;
      }
    }
    auto slot = [&](size_t k) { return k < slots_.size() ? slots_[k].as<float>() : nullptr; };
    if (absl::Status s = cuda::ApplyUpdate(ctx_.get(), x.u,
                                           {.params = w.params(),
                                            .grads = w.grads(),
                                            .n = w.trainable_size(),
                                            .grad_factor = factor,
                                            .compute_copy = w.compute_copy(),
                                            .compute_type = w.compute()},
                                           slot(0), slot(1), slot(2), clipping ? &*clip_ : nullptr);
        !s.ok()) {
      return s;
    }
    return true;
  }

  absl::StatusOr<Evaluation> Evaluate(const Dataset& test) override {
    EvaluationSum sum;
    for (int64_t start = 0; start < test.size(); start += eval_batch_) {
      const int64_t n = std::min(eval_batch_, test.size() - start);
      const Dataset rows = Rows(test, start, n);
      absl::StatusOr<cuda::LossResult> r = net_->Evaluate(rows.inputs[0], Labels(rows.targets[0]));
      if (!r.ok()) return r.status();
      sum.Add({.loss = r->loss, .correct = r->correct, .judged = n}, n);
    }
    return sum.Result();
  }

  int64_t skipped_steps() const override { return scaler_.skipped_steps(); }
  float loss_scale() const override { return scaler_.scale(); }
  LossScaler::State loss_scale_state() const override { return scaler_.state(); }
  void set_loss_scale_state(const LossScaler::State& s) override { scaler_.set_state(s); }
  absl::Status Rebind(comm::Collective* comm) override {
    // What the old collective had in flight is abandoned (it failed); the next step's
    // gradients start over on the new one.
    work_.reset();
    comm_ = comm;
    return absl::OkStatus();
  }

 private:
  GpuEngine() = default;
  DeviceParams& weights() { return net_->weights(); }
  // What the device gradients are multiplied by before the update: the loss scale undone, and
  // for device-reduced (summed) gradients the replica count.
  float GradFactor() const {
    float f = 1.0f / scaler_.scale();
    if (comm_ != nullptr && comm_->device_buffers()) f /= static_cast<float>(comm_->size());
    return f;
  }

  comm::Collective* comm_ = nullptr;
  Precision precision_ = Precision::kFloat32;
  int64_t eval_batch_ = 64;
  LossScaler scaler_;
  std::unique_ptr<cuda::GpuContext> ctx_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<DeviceGraph> net_;
  std::vector<cuda::DeviceTensor> slots_;  // the optimizer's slots, laid out as the weights
  std::optional<cuda::ClipScales> clip_;
  std::optional<BucketReducer> reducer_;
  comm::WorkPtr work_;
  bool grads_on_host_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> MakeGpuEngine(const TrainerConfig& c, int device,
                                                      comm::Collective* comm) {
  return GpuEngine::Create(c, device, comm);
}

}  // namespace lockstep::trainer
