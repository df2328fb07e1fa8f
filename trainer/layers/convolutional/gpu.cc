// The convolutions on the GPU: their device ops (layers/gpu_op.h)
// over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/keras_dense.h"
#include "trainer/layers/convolutional/conv_nd_kernels.h"
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::convolutional {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// Plans per input shape (the last batch of an epoch may be smaller), a bounded set.
template <typename Plan>
class PlanCache {
 public:
  template <typename Make>
  absl::StatusOr<Plan*> Get(const Shape& x, Make make) {
    auto it = plans_.find(x);
    if (it == plans_.end()) {
      if (plans_.size() >= 8) plans_.clear();
      absl::StatusOr<std::unique_ptr<Plan>> p = make();
      if (!p.ok()) return p.status();
      it = plans_.emplace(x, std::move(*p)).first;
    }
    return it->second.get();
  }

 private:
  std::map<Shape, std::unique_ptr<Plan>> plans_;
};

// Conv1D/2D/3D and DepthwiseConv1D/2D through cuDNN (P = cuda::CudnnConv), the transposed
// convolutions through the same plans (P = cuda::CudnnConvTranspose); SeparableConv1D/2D as its
// depthwise convolution then the pointwise kernel as a Dense over the channels.
template <typename P>
class ConvOp final : public DeviceOp {
 public:
  ConvOp(GpuContext* ctx, const GraphLayer& layer, const LayerWeights& w, Activation act,
         const char* kernel, bool separable)
      : ctx_(ctx),
        layer_(layer),
        w_(w),
        kernel_(kernel),
        separable_(separable),
        bias_(w.find("bias") != nullptr),
        tail_(ctx, act),
        dk_(ctx, w.find(kernel), w.shared()),
        dp_(ctx, w.find("pointwise_kernel"), w.shared()),
        db_(ctx, w.find("bias"), w.shared()) {}

  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    absl::StatusOr<P*> conv = Plan(*x[0]);
    if (!conv.ok()) return conv.status();
    const float* b = bias_ ? w_.at("bias").master : nullptr;
    if (!separable_) {
      LOCKSTEP_RETURN_IF_ERROR((*conv)->Forward(*x[0], w_.at(kernel_).value, b, &z_));
    } else {
      LOCKSTEP_RETURN_IF_ERROR((*conv)->Forward(*x[0], w_.at(kernel_).value, nullptr, &mid_));
      LOCKSTEP_RETURN_IF_ERROR(cuda::KerasDenseForward(ctx_, mid_, Pointwise(), b, &z_));
    }
    return tail_.Apply(z_);
  }

  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    absl::StatusOr<P*> conv = Plan(*x[0]);
    if (!conv.ok()) return conv.status();
    absl::StatusOr<const DeviceTensor*> dz = tail_.Back(z_, y, dy);
    if (!dz.ok()) return dz.status();
    absl::StatusOr<float*> dk = dk_.Target();
    absl::StatusOr<float*> db = db_.Target();
    if (!dk.ok()) return dk.status();
    if (!db.ok()) return db.status();
    const DeviceTensor* dconv = *dz;
    if (separable_) {
      absl::StatusOr<float*> dp = dp_.Target();
      if (!dp.ok()) return dp.status();
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::KerasDenseBackward(ctx_, mid_, Pointwise(), **dz, &dmid_, *dp, *db));
      LOCKSTEP_RETURN_IF_ERROR(dp_.Commit());
      dconv = &dmid_;
    }
    if (*dk != nullptr || (!separable_ && *db != nullptr)) {
      float* conv_db = separable_ ? nullptr : *db;
      if (*dk != nullptr) {
        LOCKSTEP_RETURN_IF_ERROR((*conv)->BackwardWeights(*x[0], *dconv, *dk, conv_db));
      } else {
        // A frozen kernel with a trained bias (not a Keras layout, but kept exact).
        const int64_t c = dconv->shape().back();
        LOCKSTEP_RETURN_IF_ERROR(cuda::BiasGrad(ctx_, *dconv, conv_db, dconv->size() / c, c, 1));
      }
    }
    LOCKSTEP_RETURN_IF_ERROR(dk_.Commit());
    LOCKSTEP_RETURN_IF_ERROR(db_.Commit());
    if (dx[0] != nullptr) {
      LOCKSTEP_RETURN_IF_ERROR((*conv)->BackwardData(*dconv, w_.at(kernel_).value, dx[0]));
    }
    return absl::OkStatus();
  }

 private:
  // The pointwise kernel [1..., in * multiplier, filters] as [in * multiplier, filters].
  DeviceTensor Pointwise() const {
    const DeviceTensor& p = w_.at("pointwise_kernel").value;
    const int64_t f = p.shape().back();
    return p.Reshaped({p.size() / f, f});
  }
  absl::StatusOr<P*> Plan(const DeviceTensor& x) {
    return plans_.Get(x.shape(), [&]() -> absl::StatusOr<std::unique_ptr<P>> {
      absl::StatusOr<cpu::ConvGeometry> g = graph::CallGeometry(layer_, x.shape());
      if (!g.ok()) return g.status();
      return P::Make(ctx_, *g, x.dtype(), bias_ && !separable_);
    });
  }

  GpuContext* ctx_;
  const GraphLayer& layer_;
  const LayerWeights& w_;
  const char* kernel_;
  bool separable_, bias_;
  ActivationTail tail_;
  GradOut dk_, dp_, db_;
  PlanCache<P> plans_;
  DeviceTensor z_, mid_, dmid_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::ConvOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ConvOp<cuda::CudnnConv>>(
        a.ctx, a.layer, a.weights, ActOf<graph::ConvOptions>(a.layer), "kernel", false);
  });
  r.GpuOp<graph::DepthwiseOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ConvOp<cuda::CudnnConv>>(a.ctx, a.layer, a.weights,
                                                     ActOf<graph::DepthwiseOptions>(a.layer),
                                                     "depthwise_kernel", false);
  });
  r.GpuOp<graph::SeparableOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ConvOp<cuda::CudnnConv>>(a.ctx, a.layer, a.weights,
                                                     ActOf<graph::SeparableOptions>(a.layer),
                                                     "depthwise_kernel", true);
  });
  r.GpuOp<graph::ConvTransposeOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<ConvOp<cuda::CudnnConvTranspose>>(
        a.ctx, a.layer, a.weights, ActOf<graph::ConvTransposeOptions>(a.layer), "kernel", false);
  });
}

}  // namespace lockstep::trainer::layers::convolutional
