// PReLU on the GPU: its device op over prelu.cu's kernels, alpha's gradient reduced over the
// leading axes as a bias's is (cuda::BiasGrad, a fixed order). CUDA builds only.
#include <memory>
#include <vector>

#include "trainer/layers/gpu_op.h"
#include "trainer/layers/prelu/prelu.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer {
namespace cuda {

// prelu.cu: y = x or alpha[i % alpha_size] * x; backward fills dx (may be null) and
// t = dy * x where x < 0 (fp32).
absl::Status PReluForward(GpuContext* ctx, const DeviceTensor& x, const float* alpha,
                          int64_t alpha_size, DeviceTensor* y);
absl::Status PReluBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& dy,
                           const float* alpha, int64_t alpha_size, DeviceTensor* dx,
                           DeviceTensor* t);

}  // namespace cuda

namespace layers::prelu {
namespace {

class PReluOp final : public DeviceOp {
 public:
  PReluOp(GpuContext* ctx, const LayerWeights& w)
      : ctx_(ctx),
        w_(w),
        size_(w.at("alpha").value.size()),
        da_(ctx, w.find("alpha"), w.shared()) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::PReluForward(ctx_, *x[0], w_.master("alpha"), size_, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::PReluBackward(ctx_, *x[0], dy, w_.master("alpha"), size_, dx[0], &t_));
    absl::StatusOr<float*> da = da_.Target();
    if (!da.ok()) return da.status();
    if (*da == nullptr) return absl::OkStatus();  // alpha is frozen
    LOCKSTEP_RETURN_IF_ERROR(cuda::BiasGrad(ctx_, t_, *da, t_.size() / size_, size_, 1));
    return da_.Commit();
  }

 private:
  GpuContext* ctx_;
  const LayerWeights& w_;
  int64_t size_;
  GradOut da_;
  DeviceTensor y_, t_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::PReluOptions>([](const GpuOpArgs& a) -> absl::StatusOr<std::unique_ptr<DeviceOp>> {
    return std::make_unique<PReluOp>(a.ctx, a.weights);
  });
}

}  // namespace layers::prelu
}  // namespace lockstep::trainer
