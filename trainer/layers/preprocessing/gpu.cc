// Rescaling and Normalization on the GPU: their device ops (layers/gpu_op.h)
// over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/merge.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::preprocessing {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// y = x * scale + offset with one value, or one per channel of the last axis (Rescaling;
// Normalization with its statistics folded in), as two broadcasting merges.
class AffineOp final : public DeviceOp {
 public:
  // `derive` gives (scale, offset) from the host layer (again after a reload).
  using Derive = std::function<std::pair<std::vector<float>, std::vector<float>>()>;
  AffineOp(GpuContext* ctx, DType dtype, Derive derive)
      : ctx_(ctx), dtype_(dtype), derive_(std::move(derive)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const size_t rank = x[0]->shape().size();
    if (rank != rank_) {
      rank_ = rank;
      LOCKSTEP_RETURN_IF_ERROR(Reloaded());
    }
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, MergeOp::kMultiply, {x[0], &scale_}, &t_));
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, MergeOp::kAdd, {&t_, &offset_}, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::MergeBackward(ctx_, MergeOp::kMultiply, {x[0], &scale_}, t_, dy, {dx[0], nullptr});
  }
  absl::Status Reloaded() override {
    if (rank_ == 0) return absl::OkStatus();
    auto [scale, offset] = derive_();
    for (auto [values, t] : {std::pair{&scale, &scale_}, std::pair{&offset, &offset_}}) {
      Shape s(rank_, 1);
      s.back() = static_cast<int64_t>(values->size());
      Tensor host(s);
      std::copy(values->begin(), values->end(), host.data());
      LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, host, dtype_, t));
    }
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  DType dtype_;
  Derive derive_;
  size_t rank_ = 0;
  DeviceTensor scale_, offset_, t_, y_;
};

// Rescaling's or Normalization's (scale, offset) per channel (or one for all).
std::pair<std::vector<float>, std::vector<float>> NormalizationAffine(const GraphLayer& l) {
  const graph::NormalizationOptions o = *OptionsOf<graph::NormalizationOptions>(l);
  std::vector<float> mean, var;
  if (o.mean && o.variance) {
    mean = *o.mean;
    var = *o.variance;
  } else {
    for (const graph::Weight& w : l.weights()) {
      if (w.name == "mean") mean.assign(w.value.data(), w.value.data() + w.value.size());
      if (w.name == "variance") var.assign(w.value.data(), w.value.data() + w.value.size());
    }
  }
  if (mean.size() == 1 && var.size() > 1) mean.resize(var.size(), mean[0]);
  if (var.size() == 1 && mean.size() > 1) var.resize(mean.size(), var[0]);
  std::vector<float> scale(mean.size()), offset(mean.size());
  for (size_t c = 0; c < mean.size(); ++c) {
    const float sd = std::max(std::sqrt(var[c]), 1e-7f);
    scale[c] = o.invert ? sd : 1.0f / sd;
    offset[c] = o.invert ? mean[c] : -mean[c] / sd;
  }
  return {scale, offset};
}

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::RescalingOptions>([](const GpuOpArgs& a) -> OpOr {
    const graph::RescalingOptions o = *OptionsOf<graph::RescalingOptions>(a.layer);
    return std::make_unique<AffineOp>(a.ctx, a.compute, [o] {
      return std::pair{o.scale, o.offset};
    });
  });
  r.GpuOp<graph::NormalizationOptions>([](const GpuOpArgs& a) -> OpOr {
    const graph::Layer* l = &a.layer;
    return std::make_unique<AffineOp>(a.ctx, a.compute, [l] { return NormalizationAffine(*l); });
  });
}

}  // namespace lockstep::trainer::layers::preprocessing
