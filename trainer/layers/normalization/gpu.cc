// BatchNormalization and LayerNormalization on the GPU: their device ops (layers/gpu_op.h)
// over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/layers/gpu_op.h"
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/normalization/normalization_kernels.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::normalization {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// BatchNormalization over the last axis; batch statistics in training unless the layer is
// frozen, the moving ones otherwise.
class BatchNormOp final : public DeviceOp {
 public:
  BatchNormOp(GpuContext* ctx, const GraphLayer& layer, const LayerWeights& w,
              graph::BatchNormOptions o)
      : ctx_(ctx), layer_(layer), w_(w), o_(std::move(o)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const int64_t c = x[0]->shape().back();
    p_ = {.channels = c,
          .epsilon = o_.epsilon,
          .momentum = o_.momentum,
          .batch_statistics = step.training && layer_.trainable()};
    LOCKSTEP_RETURN_IF_ERROR(mean_.Resize(ctx_, {c}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(rstd_.Resize(ctx_, {c}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(cuda::BatchNormForward(
        ctx_, x[0]->Reshaped({x[0]->size() / c, c}), w_.master("gamma"), w_.master("beta"), p_,
        w_.at("moving_mean").master, w_.at("moving_variance").master, mean_.as<float>(),
        rstd_.as<float>(), &y_));
    y_.Reshape(x[0]->shape());
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    const int64_t c = x[0]->shape().back();
    LOCKSTEP_RETURN_IF_ERROR(cuda::BatchNormBackward(
        ctx_, x[0]->Reshaped({x[0]->size() / c, c}), dy.Reshaped({dy.size() / c, c}),
        w_.master("gamma"), mean_.as<float>(), rstd_.as<float>(), p_, w_.grad("gamma"),
        w_.grad("beta"), dx[0]));
    if (dx[0] != nullptr) dx[0]->Reshape(x[0]->shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  const GraphLayer& layer_;
  const LayerWeights& w_;
  graph::BatchNormOptions o_;
  cuda::BatchNormParams p_;
  DeviceTensor mean_, rstd_, y_;
};

// LayerNormalization over the trailing axes it names.
class LayerNormOp final : public DeviceOp {
 public:
  LayerNormOp(GpuContext* ctx, const LayerWeights& w, graph::LayerNormOptions o)
      : ctx_(ctx), w_(w), o_(std::move(o)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const int64_t group = Group(*x[0]), rows = x[0]->size() / std::max<int64_t>(group, 1);
    LOCKSTEP_RETURN_IF_ERROR(mean_.Resize(ctx_, {rows}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(rstd_.Resize(ctx_, {rows}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(cuda::LayerNormForward(ctx_, *x[0], group, w_.master("gamma"),
                                                    w_.master("beta"), o_.epsilon,
                                                    mean_.as<float>(), rstd_.as<float>(), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::LayerNormBackward(ctx_, *x[0], dy, Group(*x[0]), w_.master("gamma"),
                                   mean_.as<float>(), rstd_.as<float>(), w_.grad("gamma"),
                                   w_.grad("beta"), dx[0]);
  }

 private:
  int64_t Group(const DeviceTensor& x) const {
    int64_t g = 1;
    const size_t rank = x.shape().size();
    for (size_t k = 0; k < o_.axes.size() && k < rank; ++k) g *= x.dim(rank - 1 - k);
    return g;
  }
  GpuContext* ctx_;
  const LayerWeights& w_;
  graph::LayerNormOptions o_;
  DeviceTensor mean_, rstd_, y_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::BatchNormOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<BatchNormOp>(a.ctx, a.layer, a.weights,
                                         *OptionsOf<graph::BatchNormOptions>(a.layer));
  });
  r.GpuOp<graph::LayerNormOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<LayerNormOp>(a.ctx, a.weights,
                                         *OptionsOf<graph::LayerNormOptions>(a.layer));
  });
}

}  // namespace lockstep::trainer::layers::normalization
