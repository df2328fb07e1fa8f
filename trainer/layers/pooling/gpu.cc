// The poolings on the GPU: their device ops (layers/gpu_op.h)
// over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/layers/gpu_op.h"
#include "trainer/layers/pooling/pooling.h"
#include "trainer/layers/pooling/pooling_kernels.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::pooling {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

cuda::PoolKind KindOf(graph::PoolMode m) {
  return m == graph::PoolMode::kMax ? cuda::PoolKind::kMax : cuda::PoolKind::kAverage;
}

class PoolOp final : public DeviceOp {
 public:
  PoolOp(GpuContext* ctx, const GraphLayer& layer, graph::PoolMode mode)
      : ctx_(ctx), layer_(layer), kind_(KindOf(mode)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    g_ = graph::PoolGeometry(*graph::OptionsOf<graph::PoolOptions>(layer_), x[0]->shape());
    LOCKSTEP_RETURN_IF_ERROR(cuda::PoolForward(ctx_, *x[0], g_, kind_, &y_, &argmax_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::PoolBackward(ctx_, dy, g_, kind_, argmax_, dx[0]);
  }

 private:
  GpuContext* ctx_;
  const GraphLayer& layer_;
  cuda::PoolKind kind_;
  cpu::ConvGeometry g_;
  DeviceTensor y_, argmax_;
};

class GlobalPoolOp final : public DeviceOp {
 public:
  GlobalPoolOp(GpuContext* ctx, graph::GlobalPoolOptions o) : ctx_(ctx), o_(o) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const DeviceTensor& in = *x[0];
    const int64_t n = in.dim(0), c = in.shape().back();
    const int64_t steps = n * c == 0 ? 0 : in.size() / (n * c);
    // GlobalAveragePooling1D honours a [batch, steps] mask, as on the CPU.
    const DeviceTensor* m = step.mask(0);
    if (o_.rank != 1 || m == nullptr || m->size() != n * steps) m = nullptr;
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::GlobalPoolForward(ctx_, in, m, n, steps, c, KindOf(o_.mode), &y_, &saved_));
    Shape s{n};
    if (o_.keepdims) s.insert(s.end(), static_cast<size_t>(o_.rank), 1);
    s.push_back(c);
    return y_.Reshaped(std::move(s));
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    const DeviceTensor& in = *x[0];
    const int64_t n = in.dim(0), c = in.shape().back();
    const int64_t steps = n * c == 0 ? 0 : in.size() / (n * c);
    LOCKSTEP_RETURN_IF_ERROR(cuda::GlobalPoolBackward(ctx_, dy.Reshaped({n, c}), n, steps, c,
                                                      KindOf(o_.mode), saved_, dx[0]));
    dx[0]->Reshape(in.shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  graph::GlobalPoolOptions o_;
  DeviceTensor y_, saved_;  // saved_: the arg-max, or a masked average's weights
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::PoolOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<PoolOp>(a.ctx, a.layer, OptionsOf<graph::PoolOptions>(a.layer)->mode);
  });
  r.GpuOp<graph::GlobalPoolOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<GlobalPoolOp>(a.ctx, *OptionsOf<graph::GlobalPoolOptions>(a.layer));
  });
}

}  // namespace lockstep::trainer::layers::pooling
