#include "trainer/layers/attention/attention_kernels.h"

#include <cmath>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dropout.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/gemm.h"

namespace lockstep::trainer::cuda {
namespace {

// [b, rows, h, d] (a projection's rows, heads side by side) <-> [b, h, rows, d].
__global__ void ToHeadsKernel(const float* __restrict__ src, int64_t b, int64_t rows, int64_t h,
                              int64_t d, float* __restrict__ dst) {
  const int64_t n = b * rows * h * d;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % d, j = (i / d) % h, r = (i / (d * h)) % rows, bi = i / (d * h * rows);
    dst[((bi * h + j) * rows + r) * d + c] = src[i];
  }
}
__global__ void FromHeadsKernel(const float* __restrict__ src, int64_t b, int64_t rows, int64_t h,
                                int64_t d, float* __restrict__ dst) {
  const int64_t n = b * rows * h * d;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % d, j = (i / d) % h, r = (i / (d * h)) % rows, bi = i / (d * h * rows);
    dst[i] = src[((bi * h + j) * rows + r) * d + c];
  }
}

// Which keys a query may attend to: the causal mask and the query's, value's and key's masks
// (fp32 [b, t] and [b, s] of 0/1, or null), as the CPU layer combines them. Scores rows are
// ((batch * heads + head) * t + query).
struct ScoreMask {
  const float *q = nullptr, *v = nullptr, *k = nullptr;
  int64_t heads = 1;
  bool causal = false;
  __device__ bool Allowed(int64_t row, int64_t t, int64_t s, int64_t c) const {
    const int64_t r = row % t, bi = row / t / heads;
    return !(causal && c > r) && (q == nullptr || q[bi * t + r] != 0.0f) &&
           (v == nullptr || v[bi * s + c] != 0.0f) && (k == nullptr || k[bi * s + c] != 0.0f);
  }
};

// One warp per row of scores [rows, s] (row r of its head's t queries): Keras's additive
// mask, then the softmax in place.
__global__ void SoftmaxRowsKernel(float* __restrict__ p, int64_t rows, int64_t t, int64_t s,
                                  ScoreMask mask) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  float* x = p + row * s;
  float mx = -3.4e38f;
  for (int64_t c = lane; c < s; c += kWarp) {
    const float v = x[c] + (mask.Allowed(row, t, s, c) ? 0.0f : -1e9f);
    x[c] = v;
    mx = fmaxf(mx, v);
  }
  mx = WarpMax(mx);
  float sum = 0;
  for (int64_t c = lane; c < s; c += kWarp) {
    const float e = expf(x[c] - mx);
    x[c] = e;
    sum += e;
  }
  sum = WarpSum(sum);
  for (int64_t c = lane; c < s; c += kWarp) x[c] /= sum;
}

// dS = P (dP - sum(P dP)) per row; masked scores get nothing.
__global__ void SoftmaxBackRowsKernel(const float* __restrict__ p, const float* __restrict__ dp,
                                      float* __restrict__ ds, int64_t rows, int64_t t, int64_t s,
                                      ScoreMask mask) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  const int64_t o = row * s;
  float dot = 0;
  for (int64_t c = lane; c < s; c += kWarp) dot += p[o + c] * dp[o + c];
  dot = WarpSum(dot);
  for (int64_t c = lane; c < s; c += kWarp) {
    ds[o + c] = mask.Allowed(row, t, s, c) ? p[o + c] * (dp[o + c] - dot) : 0.0f;
  }
}

unsigned int RowBlocks(int64_t rows) {
  return static_cast<unsigned int>((rows * kWarp + kThreads - 1) / kThreads);
}

absl::Status F32(GpuContext* ctx, DeviceTensor* t, Shape s) {
  return t->Resize(ctx, s, DType::kF32);
}

// An input as fp32 rows [rows, d].
absl::Status ToF32(GpuContext* ctx, const DeviceTensor& x, int64_t d, DeviceTensor* out) {
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx, out, {x.size() / std::max<int64_t>(d, 1), d}));
  return Cast(ctx, x.data(), x.dtype(), out->data(), DType::kF32, x.size());
}

// y [rows, n] = x [rows, k] w [k, n] (+ bias).
absl::Status Project(GpuContext* ctx, const float* x, const float* w, const float* bias,
                     int64_t rows, int64_t k, int64_t n, DeviceTensor* y) {
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx, y, {rows, n}));
  LOCKSTEP_RETURN_IF_ERROR(Gemm(ctx, false, false, rows, n, k, 1.0f, x, w, 0.0f, y->as<float>()));
  if (bias != nullptr) LOCKSTEP_RETURN_IF_ERROR(AddBias(ctx, y, bias, rows, n, 1));
  return absl::OkStatus();
}

// From dL/d(projection) `dp` [rows, n]: the kernel's and bias's gradients (where not null) and
// dL/dx into `dx` [rows, k] (overwritten, or added when `add`).
absl::Status ProjectBack(GpuContext* ctx, const float* x, const DeviceTensor& dp, const float* w,
                         int64_t rows, int64_t k, int64_t n, float* gw, float* gb, float* dx,
                         bool add) {
  if (gw != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(Gemm(ctx, true, false, k, n, rows, 1.0f, x, dp.as<float>(), 0.0f, gw));
  }
  if (gb != nullptr) LOCKSTEP_RETURN_IF_ERROR(BiasGrad(ctx, dp, gb, rows, n, 1));
  if (dx != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(
        Gemm(ctx, false, true, rows, k, n, 1.0f, dp.as<float>(), w, add ? 1.0f : 0.0f, dx));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Attention::Forward(const DeviceTensor& query, const DeviceTensor& value,
                                const DeviceTensor* key, const AttentionMasks& masks,
                                const AttentionWeights& w, bool training, uint64_t seed,
                                DeviceTensor* y) {
  const DeviceTensor& k = key != nullptr ? *key : value;
  b_ = query.dim(0);
  dq_ = query.shape().back();
  dv_ = value.shape().back();
  dk_ = k.shape().back();
  if (b_ <= 0 || dq_ <= 0 || dv_ <= 0 || dk_ <= 0 || k.size() / dk_ != value.size() / dv_) {
    return absl::InvalidArgumentError("Attention: query " + ShapeString(query.shape()) +
                                      ", value " + ShapeString(value.shape()) + " and key " +
                                      ShapeString(k.shape()) + " do not fit");
  }
  t_ = query.size() / (b_ * dq_);
  s_ = value.size() / (b_ * dv_);
  // A mask that does not fit its input is an error here (the CPU layer reports it too).
  auto mask = [&](const DeviceTensor* m, int64_t n,
                  const char* which) -> absl::StatusOr<const float*> {
    if (m == nullptr) return static_cast<const float*>(nullptr);
    if (m->dtype() != DType::kF32 || m->size() != b_ * n) {
      return absl::InvalidArgumentError(std::string("Attention: the ") + which + " mask " +
                                        ShapeString(m->shape()) + " does not fit");
    }
    return m->as<float>();
  };
  absl::StatusOr<const float*> qm = mask(masks.query, t_, "query");
  absl::StatusOr<const float*> vm = mask(masks.value, s_, "value");
  absl::StatusOr<const float*> km = mask(masks.key, s_, "key");
  for (const auto* m : {&qm, &vm, &km}) {
    if (!m->ok()) return m->status();
  }
  qmask_ = *qm;
  vmask_ = *vm;
  kmask_ = *km;
  own_key_ = key != nullptr;
  q_shape_ = query.shape();
  v_shape_ = value.shape();
  k_shape_ = k.shape();
  q_dtype_ = query.dtype();
  v_dtype_ = value.dtype();
  k_dtype_ = k.dtype();
  const int64_t h = spec_.heads, kd = spec_.key_dim, vd = spec_.value_dim, bh = b_ * h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kd));
  cudaStream_t st = ctx_->stream();

  LOCKSTEP_RETURN_IF_ERROR(ToF32(ctx_, query, dq_, &xq_));
  LOCKSTEP_RETURN_IF_ERROR(ToF32(ctx_, value, dv_, &xv_));
  if (own_key_) LOCKSTEP_RETURN_IF_ERROR(ToF32(ctx_, k, dk_, &xk_));
  const float* xk = own_key_ ? xk_.as<float>() : xv_.as<float>();
  auto heads = [&](const float* x, const float* wt, const float* bias, int64_t rows, int64_t d,
                   int64_t dim, DeviceTensor* out) -> absl::Status {
    LOCKSTEP_RETURN_IF_ERROR(Project(ctx_, x, wt, bias, b_ * rows, d, h * dim, &proj_));
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, out, {b_, h, rows, dim}));
    ToHeadsKernel<<<Blocks(proj_.size()), kThreads, 0, st>>>(proj_.as<float>(), b_, rows, h, dim,
                                                             out->as<float>());
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  };
  LOCKSTEP_RETURN_IF_ERROR(heads(xq_.as<float>(), w.wq, w.bq, t_, dq_, kd, &qh_));
  LOCKSTEP_RETURN_IF_ERROR(heads(xk, w.wk, w.bk, s_, dk_, kd, &kh_));
  LOCKSTEP_RETURN_IF_ERROR(heads(xv_.as<float>(), w.wv, w.bv, s_, dv_, vd, &vh_));

  // Probabilities per (batch, head), then their dropout, then the heads' outputs.
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &p_, {bh, t_, s_}));
  LOCKSTEP_RETURN_IF_ERROR(GemmBatched(ctx_, false, true, t_, s_, kd, scale, qh_.as<float>(),
                                       t_ * kd, kh_.as<float>(), s_ * kd, 0.0f, p_.as<float>(),
                                       t_ * s_, bh));
  SoftmaxRowsKernel<<<RowBlocks(bh * t_), kThreads, 0, st>>>(
      p_.as<float>(), bh * t_, t_, s_,
      ScoreMask{qmask_, vmask_, kmask_, spec_.heads, spec_.causal});
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  dropped_ = training && spec_.dropout > 0 && spec_.dropout < 1;
  seed_ = seed;
  if (dropped_) LOCKSTEP_RETURN_IF_ERROR(DropoutForward(ctx_, p_, spec_.dropout, {}, seed, &pd_));
  const float* pv = dropped_ ? pd_.as<float>() : p_.as<float>();
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &oh_, {bh, t_, vd}));
  LOCKSTEP_RETURN_IF_ERROR(GemmBatched(ctx_, false, false, t_, vd, s_, 1.0f, pv, t_ * s_,
                                       vh_.as<float>(), s_ * vd, 0.0f, oh_.as<float>(), t_ * vd,
                                       bh));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &o_, {b_ * t_, h * vd}));
  FromHeadsKernel<<<Blocks(o_.size()), kThreads, 0, st>>>(oh_.as<float>(), b_, t_, h, vd,
                                                          o_.as<float>());
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  LOCKSTEP_RETURN_IF_ERROR(Project(ctx_, o_.as<float>(), w.wo, w.bo, b_ * t_, h * vd, dq_, &proj_));
  LOCKSTEP_RETURN_IF_ERROR(y->Resize(ctx_, q_shape_, q_dtype_));
  return Cast(ctx_, proj_.data(), DType::kF32, y->data(), q_dtype_, proj_.size());
}

absl::Status Attention::Backward(const DeviceTensor& dy, const AttentionWeights& w,
                                 DeviceTensor* dquery, DeviceTensor* dvalue, DeviceTensor* dkey,
                                 const AttentionGrads& g) {
  const int64_t h = spec_.heads, kd = spec_.key_dim, vd = spec_.value_dim, bh = b_ * h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kd));
  cudaStream_t st = ctx_->stream();
  if (dy.size() != b_ * t_ * dq_) {
    return absl::InvalidArgumentError("Attention: the output gradient " + ShapeString(dy.shape()) +
                                      " does not fit the last call");
  }
  LOCKSTEP_RETURN_IF_ERROR(ToF32(ctx_, dy, dq_, &dy_));

  // The output projection.
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &do_, {b_ * t_, h * vd}));
  LOCKSTEP_RETURN_IF_ERROR(ProjectBack(ctx_, o_.as<float>(), dy_, w.wo, b_ * t_, h * vd, dq_, g.wo,
                                       g.bo, do_.as<float>(), false));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &doh_, {bh, t_, vd}));
  ToHeadsKernel<<<Blocks(do_.size()), kThreads, 0, st>>>(do_.as<float>(), b_, t_, h, vd,
                                                         doh_.as<float>());
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());

  // Attention per (batch, head): dV = P'^T dO, dP' = dO V^T, through the dropout and the
  // softmax, dQ = scale dS K, dK = scale dS^T Q.
  const float* pv = dropped_ ? pd_.as<float>() : p_.as<float>();
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dvh_, {bh, s_, vd}));
  LOCKSTEP_RETURN_IF_ERROR(GemmBatched(ctx_, true, false, s_, vd, t_, 1.0f, pv, t_ * s_,
                                       doh_.as<float>(), t_ * vd, 0.0f, dvh_.as<float>(), s_ * vd,
                                       bh));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dp_, {bh, t_, s_}));
  LOCKSTEP_RETURN_IF_ERROR(GemmBatched(ctx_, false, true, t_, s_, vd, 1.0f, doh_.as<float>(),
                                       t_ * vd, vh_.as<float>(), s_ * vd, 0.0f, dp_.as<float>(),
                                       t_ * s_, bh));
  if (dropped_) {
    LOCKSTEP_RETURN_IF_ERROR(DropoutBackward(ctx_, dp_, spec_.dropout, {}, seed_, &ds_));
    std::swap(dp_, ds_);
  }
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &ds_, {bh, t_, s_}));
  SoftmaxBackRowsKernel<<<RowBlocks(bh * t_), kThreads, 0, st>>>(
      p_.as<float>(), dp_.as<float>(), ds_.as<float>(), bh * t_, t_, s_,
      ScoreMask{qmask_, vmask_, kmask_, spec_.heads, spec_.causal});
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dqh_, {bh, t_, kd}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dkh_, {bh, s_, kd}));
  LOCKSTEP_RETURN_IF_ERROR(GemmBatched(ctx_, false, false, t_, kd, s_, scale, ds_.as<float>(),
                                       t_ * s_, kh_.as<float>(), s_ * kd, 0.0f, dqh_.as<float>(),
                                       t_ * kd, bh));
  LOCKSTEP_RETURN_IF_ERROR(GemmBatched(ctx_, true, false, s_, kd, t_, scale, ds_.as<float>(),
                                       t_ * s_, qh_.as<float>(), t_ * kd, 0.0f, dkh_.as<float>(),
                                       s_ * kd, bh));

  // The input projections; each input's gradient leaves in its dtype.
  auto back = [&](const DeviceTensor& dh, int64_t rows, int64_t dim, const float* x, int64_t d,
                  const float* wt, float* gw, float* gb, bool add) -> absl::Status {
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &flat_, {b_ * rows, h * dim}));
    FromHeadsKernel<<<Blocks(flat_.size()), kThreads, 0, st>>>(dh.as<float>(), b_, rows, h, dim,
                                                               flat_.as<float>());
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
    if (!add) LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dx_, {b_ * rows, d}));
    return ProjectBack(ctx_, x, flat_, wt, b_ * rows, d, h * dim, gw, gb, dx_.as<float>(), add);
  };
  auto leave = [&](const Shape& s, DType t, DeviceTensor* out) -> absl::Status {
    if (out == nullptr) return absl::OkStatus();
    LOCKSTEP_RETURN_IF_ERROR(out->Resize(ctx_, s, t));
    return Cast(ctx_, dx_.data(), DType::kF32, out->data(), t, dx_.size());
  };
  LOCKSTEP_RETURN_IF_ERROR(back(dqh_, t_, kd, xq_.as<float>(), dq_, w.wq, g.wq, g.bq, false));
  LOCKSTEP_RETURN_IF_ERROR(leave(q_shape_, q_dtype_, dquery));
  LOCKSTEP_RETURN_IF_ERROR(back(dvh_, s_, vd, xv_.as<float>(), dv_, w.wv, g.wv, g.bv, false));
  if (own_key_) {
    LOCKSTEP_RETURN_IF_ERROR(leave(v_shape_, v_dtype_, dvalue));
    LOCKSTEP_RETURN_IF_ERROR(back(dkh_, s_, kd, xk_.as<float>(), dk_, w.wk, g.wk, g.bk, false));
    return leave(k_shape_, k_dtype_, dkey);
  }
  // The value is also the key: its gradient sums both projections'.
  LOCKSTEP_RETURN_IF_ERROR(back(dkh_, s_, kd, xv_.as<float>(), dv_, w.wk, g.wk, g.bk, true));
  return leave(v_shape_, v_dtype_, dvalue);
}

}  // namespace lockstep::trainer::cuda
