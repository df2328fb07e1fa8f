// The GPU engine (engine.h): a DeviceModel, the optimizer as fused kernels over the flat
// buffers, the loss scaler, and the gradient average over the replica's collective.
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/optimizer_kernels.h"
#include "trainer/model/device_model.h"
#include "trainer/optim/loss_scale.h"
#include "trainer/strategy/buckets.h"
#include "trainer/strategy/engine.h"

namespace lockstep::trainer {
namespace {

using cuda::DType;

class GpuEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const TrainerConfig& c, int device,
                                                        comm::Collective* comm) {
    std::unique_ptr<GpuEngine> e(new GpuEngine);
    e->comm_ = comm;
    e->optimizer_name_ = c.optimizer;
    e->momentum_ = c.momentum;
    e->precision_ = c.precision;
    const DType compute = c.precision == Precision::kMixedFloat16    ? DType::kF16
                          : c.precision == Precision::kMixedBfloat16 ? DType::kBF16
                                                                     : DType::kF32;
    e->scaler_ = compute == DType::kF16 ? LossScaler() : LossScaler::Fixed(1.0f);
    absl::StatusOr<std::unique_ptr<cuda::GpuContext>> ctx =
        cuda::GpuContext::Create(device, {.tf32 = c.tf32});
    if (!ctx.ok()) return ctx.status();
    e->ctx_ = std::move(*ctx);
    absl::StatusOr<std::unique_ptr<SequentialModel>> model = BuildBuiltinModel(c.model, c.seed);
    if (!model.ok()) return model.status();
    e->model_ = std::move(*model);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        MakeOptimizer(c.optimizer, c.learning_rate, c.momentum);
    if (!opt.ok()) return opt.status();
    e->opt_ = std::move(*opt);
    e->opt_->Init(e->model_->Params());
    absl::StatusOr<std::unique_ptr<DeviceModel>> dm =
        DeviceModel::Create(e->ctx_.get(), *e->model_, compute);
    if (!dm.ok()) return dm.status();
    e->dm_ = std::move(*dm);
    const Shape flat{e->dm_->flat_size()};
    for (cuda::DeviceTensor* t : {&e->state1_, &e->state2_}) {
      if (absl::Status s = t->Resize(e->ctx_.get(), flat, DType::kF32); !s.ok()) return s;
      LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(t->data(), 0, t->bytes(), e->ctx_->stream()));
    }
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

  absl::Status Load(bool with_optimizer_state) override {
    if (absl::Status s = ctx_->Activate(); !s.ok()) return s;
    if (absl::Status s = dm_->LoadFlat(model_->Params(), dm_->params()); !s.ok()) return s;
    if (!with_optimizer_state) return absl::OkStatus();
    // Host state: sgd [velocity...] (none without momentum); adam [step, m..., v...].
    std::vector<Tensor*> st = opt_->State();
    const size_t np = model_->Params().size();
    if (optimizer_name_ == "adam" && st.size() == 1 + 2 * np) {
      adam_step_ = static_cast<int64_t>(st[0]->data()[0]);
      if (absl::Status s = dm_->LoadFlat({st.begin() + 1, st.begin() + 1 + np}, state1());
          !s.ok()) {
        return s;
      }
      return dm_->LoadFlat({st.begin() + 1 + np, st.end()}, state2());
    }
    if (optimizer_name_ == "sgd" && st.size() == np) return dm_->LoadFlat(st, state1());
    return absl::OkStatus();
  }

  absl::Status Store() override {
    if (absl::Status s = dm_->StoreFlat(dm_->params(), model_->Params()); !s.ok()) return s;
    std::vector<Tensor*> st = opt_->State();
    const size_t np = model_->Params().size();
    if (optimizer_name_ == "adam" && st.size() == 1 + 2 * np) {
      st[0]->data()[0] = static_cast<float>(adam_step_);
      if (absl::Status s = dm_->StoreFlat(state1(), {st.begin() + 1, st.begin() + 1 + np});
          !s.ok()) {
        return s;
      }
      return dm_->StoreFlat(state2(), {st.begin() + 1 + np, st.end()});
    }
    if (optimizer_name_ == "sgd" && st.size() == np) return dm_->StoreFlat(state1(), st);
    return absl::OkStatus();
  }

  absl::StatusOr<cpu::XentResult> TrainStep(const Batch& b) override {
    absl::StatusOr<cpu::XentResult> r = dm_->TrainStep(b.images, b.labels, scaler_.scale());
    if (!r.ok()) return r.status();
    grads_on_host_ = false;
    if (comm_ == nullptr) return r;
    if (comm_->device_buffers()) {
      // NCCL: one all-reduce of the flat gradients on the backend's stream, once backward
      // (queued on ours) has written them.
      if (absl::Status s = ctx_->Synchronize(); !s.ok()) return s;
      work_ = comm_->AllReduce(dm_->grads(), dm_->flat_size());
    } else {
      if (absl::Status s = dm_->StoreFlat(dm_->grads(), model_->Grads()); !s.ok()) return s;
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
    return dm_->LoadFlat(model_->Grads(), dm_->grads());
  }

  absl::Status GradientsToHost() override {
    if (grads_on_host_) return absl::OkStatus();
    grads_on_host_ = true;
    if (absl::Status s = dm_->StoreFlat(dm_->grads(), model_->Grads()); !s.ok()) return s;
    // Device-reduced gradients are sums, scaled by the loss scale: make them the average.
    const float factor = GradFactor();
    for (Tensor* g : model_->Grads()) {
      for (float& v : g->values()) v *= factor;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Apply(float lr) override {
    const float factor = GradFactor();
    if (precision_ == Precision::kMixedFloat16) {
      // Every replica holds the same reduced gradients, so all make the same choice.
      absl::StatusOr<bool> finite = cuda::AllFinite(ctx_.get(), dm_->grads(), dm_->flat_size());
      if (!finite.ok()) return finite.status();
      if (!scaler_.Update(*finite)) return false;
    }
    cuda::UpdateArgs a{.params = dm_->params(),
                       .grads = dm_->grads(),
                       .n = dm_->flat_size(),
                       .grad_factor = factor,
                       .compute_copy = dm_->compute_copy(),
                       .compute_type = dm_->compute()};
    absl::Status s;
    if (optimizer_name_ == "adam") {
      ++adam_step_;
      const double t = static_cast<double>(adam_step_);
      const float c1 = static_cast<float>(1.0 - std::pow(0.9, t));
      const float c2 = static_cast<float>(1.0 - std::pow(0.999, t));
      s = cuda::AdamUpdate(ctx_.get(), a, state1(), state2(), 0.9f, 0.999f, lr * std::sqrt(c2) / c1,
                           1e-7f * std::sqrt(c2));
    } else {
      s = cuda::SgdUpdate(ctx_.get(), a, state1(), lr, momentum_);
    }
    if (!s.ok()) return s;
    opt_->set_learning_rate(lr);
    return true;
  }

  absl::StatusOr<Evaluation> Evaluate(const Dataset& test) override {
    constexpr int64_t kBatch = 1000;
    double loss = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t start = 0; start < test.size(); start += kBatch) {
      const int64_t n = std::min(kBatch, test.size() - start);
      Shape shape = test.images.shape();
      shape[0] = n;
      Tensor x(shape);
      const int64_t each = test.example_size();
      std::vector<int32_t> y(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(test.images.data() + (start + i) * each, each, x.data() + i * each);
        y[static_cast<size_t>(i)] = test.labels[static_cast<size_t>(start + i)];
      }
      absl::StatusOr<cpu::XentResult> r = dm_->Evaluate(x, y);
      if (!r.ok()) return r.status();
      loss += r->loss * static_cast<double>(n);
      correct += r->correct;
      seen += n;
    }
    if (seen == 0) return Evaluation{};
    return Evaluation{.accuracy = static_cast<double>(correct) / static_cast<double>(seen),
                      .loss = loss / static_cast<double>(seen)};
  }

  int64_t skipped_steps() const override { return scaler_.skipped_steps(); }
  float loss_scale() const override { return scaler_.scale(); }

 private:
  GpuEngine() = default;
  float* state1() const { return state1_.as<float>(); }
  float* state2() const { return state2_.as<float>(); }
  // What the device gradients are multiplied by before the update: the loss scale undone, and
  // for device-reduced (summed) gradients the replica count.
  float GradFactor() const {
    float f = 1.0f / scaler_.scale();
    if (comm_ != nullptr && comm_->device_buffers()) f /= static_cast<float>(comm_->size());
    return f;
  }

  comm::Collective* comm_ = nullptr;
  std::string optimizer_name_;
  Precision precision_ = Precision::kFloat32;
  float momentum_ = 0;
  LossScaler scaler_;
  std::unique_ptr<cuda::GpuContext> ctx_;
  std::unique_ptr<SequentialModel> model_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<DeviceModel> dm_;
  cuda::DeviceTensor state1_, state2_;  // sgd: velocity; adam: m, v
  int64_t adam_step_ = 0;
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
