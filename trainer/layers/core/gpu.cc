// Dense, the activation layers and Embedding on the GPU: their device ops (layers/gpu_op.h)
// over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/keras_dense.h"
#include "trainer/kernels/cuda/masking.h"
#include "trainer/kernels/cuda/merge.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::core {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// Dense: the kernel over the last axis, bias, activation.
class DenseOp final : public DeviceOp {
 public:
  DenseOp(GpuContext* ctx, const LayerWeights& w, Activation act)
      : ctx_(ctx),
        w_(w),
        tail_(ctx, act),
        dk_(ctx, w.find("kernel"), w.shared()),
        db_(ctx, w.find("bias"), w.shared()) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const DeviceWeight* b = w_.find("bias");
    LOCKSTEP_RETURN_IF_ERROR(cuda::KerasDenseForward(ctx_, *x[0], w_.at("kernel").value,
                                                     b != nullptr ? b->master : nullptr, &z_));
    return tail_.Apply(z_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    absl::StatusOr<const DeviceTensor*> dz = tail_.Back(z_, y, dy);
    if (!dz.ok()) return dz.status();
    absl::StatusOr<float*> dk = dk_.Target();
    absl::StatusOr<float*> db = db_.Target();
    if (!dk.ok()) return dk.status();
    if (!db.ok()) return db.status();
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::KerasDenseBackward(ctx_, *x[0], w_.at("kernel").value, **dz, dx[0], *dk, *db));
    LOCKSTEP_RETURN_IF_ERROR(dk_.Commit());
    return db_.Commit();
  }

 private:
  GpuContext* ctx_;
  const LayerWeights& w_;
  ActivationTail tail_;
  GradOut dk_, db_;
  DeviceTensor z_;
};

class ActivationOp final : public DeviceOp {
 public:
  ActivationOp(GpuContext* ctx, Activation a) : ctx_(ctx), a_(a) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::ActivationForward(ctx_, a_, *x[0], &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::ActivationBackward(ctx_, a_, *x[0], y, dy, dx[0]);
  }

 private:
  GpuContext* ctx_;
  Activation a_;
  DeviceTensor y_;
};

// Embedding: rows of the table by id (fp32 ids); an id outside the table is counted in `bad`.
// With mask_zero, id 0 is padding: the output's mask is ids != 0.
class EmbeddingOp final : public DeviceOp {
 public:
  EmbeddingOp(GpuContext* ctx, const LayerWeights& w, bool mask_zero, int* bad)
      : ctx_(ctx), w_(w), mask_zero_(mask_zero), bad_(bad) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::EmbeddingForward(ctx_, *x[0], w_.at("embeddings").value, &y_, bad_));
    if (mask_zero_) {
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::CompareForward(ctx_, *x[0], CompareOp::kNotEqual, 0.0f, DType::kF32, &mask_));
    }
    return ViewOf(y_);
  }
  const DeviceTensor* OwnMask() const override { return mask_zero_ ? &mask_ : nullptr; }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>&) override {
    const DeviceWeight& t = w_.at("embeddings");
    if (t.grad == nullptr) return absl::OkStatus();
    return cuda::EmbeddingBackward(ctx_, *x[0], dy, t.value.dim(0), t.grad);
  }

 private:
  GpuContext* ctx_;
  const LayerWeights& w_;
  bool mask_zero_;
  int* bad_;
  DeviceTensor y_, mask_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::DenseOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<DenseOp>(a.ctx, a.weights, ActOf<graph::DenseOptions>(a.layer));
  });
  r.GpuOp<Activation>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ActivationOp>(a.ctx, *OptionsOf<Activation>(a.layer));
  });
  r.GpuOp<graph::ReluOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ActivationOp>(
        a.ctx, *graph::ReluActivation(*OptionsOf<graph::ReluOptions>(a.layer)));
  });
  r.GpuOp<graph::EmbeddingOptions>([](const GpuOpArgs& a) -> OpOr {
    absl::StatusOr<int*> bad = a.bad_input_counter();
    if (!bad.ok()) return bad.status();
    return std::make_unique<EmbeddingOp>(
        a.ctx, a.weights, OptionsOf<graph::EmbeddingOptions>(a.layer)->mask_zero, *bad);
  });
}

}  // namespace lockstep::trainer::layers::core
