#pragma once
// Keras's MultiHeadAttention on the GPU with the CPU layer's semantics
// (layers/attention/attention.h): per-head projections of query, key and value (Keras's kernel
// layouts), scaled dot-product scores softmaxed over the keys (with the causal mask as Keras's
// additive -1e9), dropout on the probabilities in training, and the heads projected back to
// the query's width. Attention runs over every axis between the batch and the features
// (flattened). The per-head products are strided-batched GEMMs; inputs and outputs are in any
// storage dtype, the arithmetic, the saved projections and probabilities fp32 over the master
// weights. The dropout draws are counter-based (dropout.h): the backward pass regenerates them.
// The query's, value's and key's masks (Embedding mask_zero, Masking) combine with the causal
// mask as on the CPU: a query attends to the keys whose masks and its own are all 1.
// Thread-safety: one thread per object (the context's).

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

struct AttentionSpec {
  int64_t heads = 1, key_dim = 1, value_dim = 1;
  float dropout = 0;
  bool causal = false;
};

// The fp32 weights in Keras's layouts (biases null without use_bias): query/key/value kernels
// [d, heads, dim], their biases [heads, dim], the output kernel [heads, value_dim, d_query] and
// bias [d_query]. For the gradients, null where a weight is not trained.
// fp32 [b, ...] masks of the query's and the value's (and key's) positions, or null.
struct AttentionMasks {
  const DeviceTensor *query = nullptr, *value = nullptr, *key = nullptr;
};

struct AttentionWeights {
  const float *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr, *wv = nullptr,
              *bv = nullptr, *wo = nullptr, *bo = nullptr;
};
struct AttentionGrads {
  float *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr, *wv = nullptr, *bv = nullptr,
        *wo = nullptr, *bo = nullptr;
};

class Attention {
 public:
  Attention(GpuContext* ctx, AttentionSpec s) : ctx_(ctx), spec_(s) {}

  // y (the query's shape and dtype) from query [b, ..., dq], value [b, ..., dv] and key
  // (null: the value) [b, ..., dk], and their masks (kept until Backward). `seed` keys the
  // dropout draws of a training call.
  absl::Status Forward(const DeviceTensor& query, const DeviceTensor& value,
                       const DeviceTensor* key, const AttentionMasks& masks,
                       const AttentionWeights& w, bool training, uint64_t seed, DeviceTensor* y);
  // After Forward: dquery, dvalue, dkey (each may be null; without a key the value's gradient
  // sums both uses) in their inputs' dtypes, and the weights' gradients (overwritten).
  absl::Status Backward(const DeviceTensor& dy, const AttentionWeights& w, DeviceTensor* dquery,
                        DeviceTensor* dvalue, DeviceTensor* dkey, const AttentionGrads& g);

 private:
  GpuContext* ctx_;
  AttentionSpec spec_;
  const float *qmask_ = nullptr, *vmask_ = nullptr, *kmask_ = nullptr;
  int64_t b_ = 0, t_ = 0, s_ = 0, dq_ = 0, dk_ = 0, dv_ = 0;
  bool own_key_ = false, dropped_ = false;
  uint64_t seed_ = 0;
  Shape q_shape_, v_shape_, k_shape_;
  DType q_dtype_ = DType::kF32, v_dtype_ = DType::kF32, k_dtype_ = DType::kF32;
  // fp32: the inputs [rows, d]; projections [rows, heads * dim] and per head [b, h, rows, dim];
  // probabilities (and after dropout) [b, h, t, s]; the heads' outputs [b * t, h * vd].
  DeviceTensor xq_, xk_, xv_, proj_, qh_, kh_, vh_, p_, pd_, oh_, o_;
  // Backward scratch.
  DeviceTensor dy_, do_, doh_, dp_, ds_, dqh_, dkh_, dvh_, flat_, dx_;
};

}  // namespace lockstep::trainer::cuda
