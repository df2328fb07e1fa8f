// Dropout and GaussianNoise on the GPU: their device ops (layers/gpu_op.h)
// over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/dropout.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/regularization/regularization.h"

namespace lockstep::trainer::layers::regularization {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// Dropout and GaussianNoise: identity outside training.
class NoiseOp final : public DeviceOp {
 public:
  NoiseOp(GpuContext* ctx, bool dropout, float amount, Shape noise_shape)
      : ctx_(ctx), dropout_(dropout), amount_(amount), noise_(std::move(noise_shape)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    active_ = step.training && amount_ > 0;
    if (!active_) return ViewOf(*x[0]);
    seed_ = step.seed;
    if (!dropout_) {
      LOCKSTEP_RETURN_IF_ERROR(cuda::GaussianNoise(ctx_, *x[0], amount_, seed_, &y_));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::DropoutForward(ctx_, *x[0], amount_, NoiseShape(*x[0]), seed_, &y_));
    }
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    if (!active_ || !dropout_) return Copy(ctx_, dy, dx[0]);
    return cuda::DropoutBackward(ctx_, dy, amount_, NoiseShape(*x[0]), seed_, dx[0]);
  }

 private:
  // Keras's noise_shape (per example; 1 broadcasts) with the batch axis.
  Shape NoiseShape(const DeviceTensor& x) const {
    if (noise_.empty()) return {};
    Shape s{x.dim(0)};
    for (size_t a = 0; a < noise_.size(); ++a) s.push_back(noise_[a] == 1 ? 1 : x.dim(a + 1));
    return s;
  }
  GpuContext* ctx_;
  bool dropout_;
  float amount_;  // the rate, or the standard deviation
  Shape noise_;
  bool active_ = false;
  uint64_t seed_ = 0;
  DeviceTensor y_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::DropoutOptions>([](const GpuOpArgs& a) -> OpOr {
    const graph::DropoutOptions o = *OptionsOf<graph::DropoutOptions>(a.layer);
    return std::make_unique<NoiseOp>(a.ctx, true, o.rate, o.noise_shape);
  });
  r.GpuOp<graph::GaussianNoiseOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<NoiseOp>(
        a.ctx, false, OptionsOf<graph::GaussianNoiseOptions>(a.layer)->stddev, Shape{});
  });
}

}  // namespace lockstep::trainer::layers::regularization
