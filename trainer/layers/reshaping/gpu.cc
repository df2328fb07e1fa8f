// Flatten, Reshape, RepeatVector, the paddings and croppings, UpSampling on the GPU: their device
// ops (layers/gpu_op.h) over the CUDA kernels, registered with the layer registry. CUDA builds
// only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/merge.h"
#include "trainer/kernels/cuda/spatial.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::layers::reshaping {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// Flatten, Reshape: a view with the node's output shape.
class ReshapeOp final : public DeviceOp {
 public:
  ReshapeOp(GpuContext* ctx, Shape per_example) : ctx_(ctx), out_(std::move(per_example)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    Shape s{x[0]->dim(0)};
    s.insert(s.end(), out_.begin(), out_.end());
    return x[0]->Reshaped(std::move(s));
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    LOCKSTEP_RETURN_IF_ERROR(Copy(ctx_, dy, dx[0]));
    dx[0]->Reshape(x[0]->shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  Shape out_;
};

// RepeatVector: [b, d] -> [b, n, d] as zeros [b, n, d] + x [b, 1, d] broadcast, whose
// gradient sums over the repeats.
class RepeatOp final : public DeviceOp {
 public:
  RepeatOp(GpuContext* ctx, int64_t n) : ctx_(ctx), n_(n) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const int64_t b = x[0]->dim(0), d = x[0]->dim(1);
    LOCKSTEP_RETURN_IF_ERROR(zeros_.Resize(ctx_, {b, n_, d}, x[0]->dtype()));
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(zeros_.data(), 0, zeros_.bytes(), ctx_->stream()));
    x3_ = x[0]->Reshaped({b, 1, d});
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, MergeOp::kAdd, {&zeros_, &x3_}, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    x3_ = x[0]->Reshaped({x[0]->dim(0), 1, x[0]->dim(1)});
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::MergeBackward(ctx_, MergeOp::kAdd, {&zeros_, &x3_}, y, dy, {nullptr, dx[0]}));
    dx[0]->Reshape(x[0]->shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  int64_t n_;
  DeviceTensor zeros_, x3_, y_;
};

cuda::Axes3 Axes(const graph::AxisPairs& p, bool first, int sign) {
  cuda::Axes3 a{0, 0, 0};
  for (size_t i = 0; i < p.size() && i < 3; ++i) a[i] = sign * (first ? p[i].first : p[i].second);
  return a;
}

// ZeroPadding (positive amounts) and Cropping (negative), each the other's gradient.
class PadCropOp final : public DeviceOp {
 public:
  PadCropOp(GpuContext* ctx, graph::PadCropOptions o) : ctx_(ctx), o_(std::move(o)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const int sign = o_.pad ? 1 : -1;
    LOCKSTEP_RETURN_IF_ERROR(cuda::PadOrCrop(ctx_, *x[0], o_.rank, Axes(o_.pairs, true, sign),
                                             Axes(o_.pairs, false, sign), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    const int sign = o_.pad ? -1 : 1;
    return cuda::PadOrCrop(ctx_, dy, o_.rank, Axes(o_.pairs, true, sign),
                           Axes(o_.pairs, false, sign), dx[0]);
  }

 private:
  GpuContext* ctx_;
  graph::PadCropOptions o_;
  DeviceTensor y_;
};

class UpSamplingOp final : public DeviceOp {
 public:
  UpSamplingOp(GpuContext* ctx, graph::UpSamplingOptions o) : ctx_(ctx), o_(std::move(o)) {
    for (size_t i = 0; i < o_.size.size() && i < 3; ++i) size_[i] = o_.size[i];
  }
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    if (o_.interpolation == graph::Interpolation::kBilinear) {
      LOCKSTEP_RETURN_IF_ERROR(cuda::UpsampleBilinear2d(ctx_, *x[0], x[0]->dim(1) * size_[0],
                                                        x[0]->dim(2) * size_[1], &y_));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(cuda::UpsampleNearest(ctx_, *x[0], o_.rank, size_, &y_));
    }
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    if (o_.interpolation == graph::Interpolation::kBilinear) {
      return cuda::UpsampleBilinear2dBackward(ctx_, dy, x[0]->dim(1), x[0]->dim(2), dx[0]);
    }
    return cuda::UpsampleNearestBackward(ctx_, dy, o_.rank, size_, dx[0]);
  }

 private:
  GpuContext* ctx_;
  graph::UpSamplingOptions o_;
  cuda::Axes3 size_{1, 1, 1};
  DeviceTensor y_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::ReshapeOptions>(
      [](const GpuOpArgs& a) -> OpOr { return std::make_unique<ReshapeOp>(a.ctx, a.out); });
  r.GpuOp<graph::RepeatOptions>(
      [](const GpuOpArgs& a) -> OpOr { return std::make_unique<RepeatOp>(a.ctx, a.out[0]); });
  r.GpuOp<graph::PadCropOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<PadCropOp>(a.ctx, *OptionsOf<graph::PadCropOptions>(a.layer));
  });
  r.GpuOp<graph::UpSamplingOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<UpSamplingOp>(a.ctx, *OptionsOf<graph::UpSamplingOptions>(a.layer));
  });
}

}  // namespace lockstep::trainer::layers::reshaping
