// MultiHeadAttention on the GPU: their device ops (layers/gpu_op.h)
// over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/layers/attention/attention.h"
#include "trainer/layers/attention/attention_kernels.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::attention {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// MultiHeadAttention over the fp32 master weights (attention.h): [query, value] or [query,
// value, key].
class AttentionOp final : public DeviceOp {
 public:
  AttentionOp(GpuContext* ctx, const LayerWeights& w, const graph::MultiHeadAttentionOptions& o)
      : w_(w),
        attn_(ctx, {.heads = o.num_heads,
                    .key_dim = o.key_dim,
                    .value_dim = o.value_dim > 0 ? o.value_dim : o.key_dim,
                    .dropout = o.dropout,
                    .causal = o.use_causal_mask}) {
    for (const char* n : kNames) grads_.emplace_back(ctx, w.find(n), w.shared());
  }
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const cuda::AttentionMasks masks{step.mask(0), step.mask(1), step.mask(2)};
    LOCKSTEP_RETURN_IF_ERROR(attn_.Forward(*x[0], *x[1], x.size() > 2 ? x[2] : nullptr, masks,
                                           Weights(), step.training, step.seed, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    float* g[8];
    for (size_t k = 0; k < 8; ++k) {
      absl::StatusOr<float*> t = grads_[k].Target();
      if (!t.ok()) return t.status();
      g[k] = *t;
    }
    LOCKSTEP_RETURN_IF_ERROR(attn_.Backward(dy, Weights(), dx[0], dx[1],
                                            x.size() > 2 ? dx[2] : nullptr,
                                            {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]}));
    for (GradOut& o : grads_) LOCKSTEP_RETURN_IF_ERROR(o.Commit());
    return absl::OkStatus();
  }

 private:
  static constexpr const char* kNames[8] = {"query/kernel",
                                            "query/bias",
                                            "key/kernel",
                                            "key/bias",
                                            "value/kernel",
                                            "value/bias",
                                            "attention_output/kernel",
                                            "attention_output/bias"};
  const float* Master(size_t k) const {
    const DeviceWeight* d = w_.find(kNames[k]);
    return d != nullptr ? d->master : nullptr;
  }
  cuda::AttentionWeights Weights() const {
    return {Master(0), Master(1), Master(2), Master(3), Master(4), Master(5), Master(6), Master(7)};
  }
  const LayerWeights& w_;
  cuda::Attention attn_;
  std::vector<GradOut> grads_;
  DeviceTensor y_;
};

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::MultiHeadAttentionOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<AttentionOp>(a.ctx, a.weights,
                                         *OptionsOf<graph::MultiHeadAttentionOptions>(a.layer));
  });
}

}  // namespace lockstep::trainer::layers::attention
