// Add, Subtract, Multiply, Average, Maximum, Minimum and Concatenate on the GPU: their device ops
// (layers/gpu_op.h) over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/merge.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::merging {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

class MergeDeviceOp final : public DeviceOp {
 public:
  MergeDeviceOp(GpuContext* ctx, MergeOp op) : ctx_(ctx), op_(op) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, op_, x, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::MergeBackward(ctx_, op_, x, y, dy, dx);
  }

 private:
  GpuContext* ctx_;
  MergeOp op_;
  DeviceTensor y_;
};

class ConcatOp final : public DeviceOp {
 public:
  ConcatOp(GpuContext* ctx, int64_t axis) : ctx_(ctx), axis_(axis) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::ConcatForward(ctx_, x, Axis(*x[0]), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::ConcatBackward(ctx_, dy, x, Axis(*x[0]), dx);
  }

 private:
  // The axis counted with the batch (negative from the end, as Keras's).
  int Axis(const DeviceTensor& x) const {
    const auto rank = static_cast<int64_t>(x.shape().size());
    return static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
  }
  GpuContext* ctx_;
  int64_t axis_;
  DeviceTensor y_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<MergeOp>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<MergeDeviceOp>(a.ctx, *OptionsOf<MergeOp>(a.layer));
  });
  r.GpuOp<graph::ConcatOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ConcatOp>(a.ctx, OptionsOf<graph::ConcatOptions>(a.layer)->axis);
  });
}

}  // namespace lockstep::trainer::layers::merging
