// Masking, the comparisons and a call's mask= argument on the GPU: their device ops
// (layers/gpu_op.h) over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/masking.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::masking {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// Masking: time steps whose features all equal the value are zeroed and masked.
class MaskingOp final : public DeviceOp {
 public:
  MaskingOp(GpuContext* ctx, float value) : ctx_(ctx), value_(value) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::MaskingForward(ctx_, *x[0], value_, &y_, &mask_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::MaskingBackward(ctx_, dy, mask_, dx[0]);
  }
  const DeviceTensor* OwnMask() const override { return &mask_; }

 private:
  GpuContext* ctx_;
  float value_;
  DeviceTensor y_, mask_;
};

// A comparison against a constant (1 where it holds, else 0, in the input's dtype): no gradient.
class ComparisonOp final : public DeviceOp {
 public:
  ComparisonOp(GpuContext* ctx, graph::CompareOptions o) : ctx_(ctx), o_(o) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::CompareForward(ctx_, *x[0], o_.op, o_.constant, x[0]->dtype(), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor&, const std::vector<DeviceTensor*>&) override {
    return absl::OkStatus();  // its input takes no gradient (Differentiable is false)
  }

 private:
  GpuContext* ctx_;
  graph::CompareOptions o_;
  DeviceTensor y_;
};

// [x, m]: x passes through with m (as fp32) as its mask.
class MaskWithOp final : public DeviceOp {
 public:
  explicit MaskWithOp(GpuContext* ctx) : ctx_(ctx) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const DeviceTensor& m = *x[1];
    LOCKSTEP_RETURN_IF_ERROR(mask_.Resize(ctx_, m.shape(), DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::Cast(ctx_, m.data(), m.dtype(), mask_.data(), DType::kF32, m.size()));
    return ViewOf(*x[0]);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    if (dx[0] == nullptr) return absl::OkStatus();
    return Copy(ctx_, dy, dx[0]);
  }
  const DeviceTensor* OwnMask() const override { return &mask_; }

 private:
  GpuContext* ctx_;
  DeviceTensor mask_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::MaskingOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<MaskingOp>(a.ctx, OptionsOf<graph::MaskingOptions>(a.layer)->value);
  });
  r.GpuOp<graph::CompareOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ComparisonOp>(a.ctx, *OptionsOf<graph::CompareOptions>(a.layer));
  });
  r.GpuOp<graph::MaskWithOptions>(
      [](const GpuOpArgs& a) -> OpOr { return std::make_unique<MaskWithOp>(a.ctx); });
}

}  // namespace lockstep::trainer::layers::masking
