#include "trainer/layers/normalization/normalization_kernels.h"

#include <algorithm>
#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"

namespace lockstep::trainer::cuda {
namespace {

// Per-channel sums over rows: a block covers 32 channels and one chunk of rows, its 8 rows of
// threads striding through the chunk; the block's partial sums go to partial[k][chunk][c] and
// a second kernel adds the chunks in order. kOut sums per channel.
constexpr int kTileC = 32;
constexpr int kTileR = 8;
constexpr int64_t kMaxChunks = 1024;

template <int kOut, typename F>
__global__ void ChannelPartialsKernel(F f, int64_t rows, int64_t c, int64_t per_chunk,
                                      float* __restrict__ partial) {
  const int64_t ch = int64_t{blockIdx.x} * kTileC + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * per_chunk;
  const int64_t r1 = r0 + per_chunk < rows ? r0 + per_chunk : rows;
  float acc[kOut];
#pragma unroll
  for (int k = 0; k < kOut; ++k) acc[k] = 0.0f;
  if (ch < c) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileR) f(r, ch, acc);
  }
  __shared__ float s[kOut][kTileR][kTileC];
#pragma unroll
  for (int k = 0; k < kOut; ++k) s[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || ch >= c) return;
#pragma unroll
  for (int k = 0; k < kOut; ++k) {
    float sum = 0.0f;
    for (int j = 0; j < kTileR; ++j) sum += s[k][j][threadIdx.x];
    partial[(int64_t{k} * gridDim.y + blockIdx.y) * c + ch] = sum;
  }
}

// out[k * c + ch] = the sum over chunks of partial[k][chunk][ch], in chunk order.
__global__ void ChannelFinishKernel(const float* __restrict__ partial, int64_t chunks, int64_t c,
                                    int outs, float* __restrict__ out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= c * outs) return;
  const int64_t k = i / c, ch = i % c;
  double sum = 0.0;
  for (int64_t j = 0; j < chunks; ++j) sum += partial[(k * chunks + j) * c + ch];
  out[i] = static_cast<float>(sum);
}

template <typename T>
struct SumX {
  const T* x;
  int64_t c;
  __device__ void operator()(int64_t r, int64_t ch, float* acc) const {
    acc[0] += ToFloat(x[r * c + ch]);
  }
};

template <typename T>
struct SumSquaredDeviation {
  const T* x;
  const float* mean;
  int64_t c;
  __device__ void operator()(int64_t r, int64_t ch, float* acc) const {
    const float v = ToFloat(x[r * c + ch]) - mean[ch];
    acc[0] += v * v;
  }
};

// sum dy and sum dy (x - mean), per channel.
template <typename T>
struct BatchNormGradSums {
  const T* x;
  const T* dy;
  const float* mean;
  int64_t c;
  __device__ void operator()(int64_t r, int64_t ch, float* acc) const {
    const float g = ToFloat(dy[r * c + ch]);
    acc[0] += g;
    acc[1] += g * (ToFloat(x[r * c + ch]) - mean[ch]);
  }
};

// LayerNormalization's parameter gradients: sum dy xhat and sum dy per position of the group.
template <typename T>
struct LayerNormParamSums {
  const T* x;
  const T* dy;
  const float* mean;
  const float* rstd;
  int64_t group;
  __device__ void operator()(int64_t r, int64_t j, float* acc) const {
    const float g = ToFloat(dy[r * group + j]);
    acc[0] += g * (ToFloat(x[r * group + j]) - mean[r]) * rstd[r];
    acc[1] += g;
  }
};

// Sums f over rows per channel into out ([kOut * c] fp32), through scratch from the context.
template <int kOut, typename F>
absl::Status ChannelSums(GpuContext* ctx, F f, int64_t rows, int64_t c, float* out) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(kMaxChunks, (rows + 63) / 64));
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  absl::StatusOr<DeviceTensor> partial = DeviceTensor::Make(ctx, {kOut, chunks, c}, DType::kF32);
  if (!partial.ok()) return partial.status();
  const dim3 grid(static_cast<unsigned int>((c + kTileC - 1) / kTileC),
                  static_cast<unsigned int>(chunks));
  ChannelPartialsKernel<kOut, F><<<grid, dim3(kTileC, kTileR), 0, ctx->stream()>>>(
      f, rows, c, per_chunk, partial->as<float>());
  ChannelFinishKernel<<<Blocks(c * kOut), kThreads, 0, ctx->stream()>>>(partial->as<float>(),
                                                                        chunks, c, kOut, out);
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  // The scratch goes back to the caching allocator; its stream order keeps it valid for the
  // queued kernels.
  return absl::OkStatus();
}

// From the sums: mean and rstd (batch statistics, or the moving ones), the moving update, and
// the per-channel scale and shift of the forward pass.
__global__ void BatchNormStatsKernel(const float* __restrict__ sq, int64_t rows, int64_t c,
                                     BatchNormParams p, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, float* __restrict__ mm,
                                     float* __restrict__ mv, float* mean, float* __restrict__ rstd,
                                     float* __restrict__ scale, float* __restrict__ shift) {
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float mu, r;
  if (p.batch_statistics) {
    mu = mean[j];  // the mean pass's
    const float var = sq[j] / static_cast<float>(rows);
    r = 1.0f / sqrtf(var + p.epsilon);
    mm[j] = mm[j] * p.momentum + mu * (1 - p.momentum);
    mv[j] = mv[j] * p.momentum + var * (1 - p.momentum);
  } else {
    mu = mm[j];
    r = 1.0f / sqrtf(mv[j] + p.epsilon);
  }
  mean[j] = mu;
  rstd[j] = r;
  scale[j] = r * (gamma != nullptr ? gamma[j] : 1.0f);
  shift[j] = (beta != nullptr ? beta[j] : 0.0f) - mu * scale[j];
}

// sum[j] /= rows, in place.
__global__ void MeanKernel(float* sum, int64_t rows, int64_t c) {
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j < c) sum[j] /= static_cast<float>(rows);
}

template <typename T>
__global__ void ScaleShiftKernel(const T* __restrict__ x, const float* __restrict__ scale,
                                 const float* __restrict__ shift, int64_t n, int64_t c,
                                 T* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t j = i % c;
    y[i] = FromFloat<T>(ToFloat(x[i]) * scale[j] + shift[j]);
  }
}

// The parameter gradients, and the coefficients of dx = dy gr_scale + k0 + k1 (x - mean).
__global__ void BatchNormGradKernel(const float* __restrict__ sums, int64_t rows, int64_t c,
                                    bool batch, const float* __restrict__ gamma,
                                    const float* __restrict__ rstd, float* __restrict__ dgamma,
                                    float* __restrict__ dbeta, float* __restrict__ coef) {
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const float a = sums[j], b = sums[c + j];
  const float r = rstd[j];
  if (dgamma != nullptr) dgamma[j] += b * r;
  if (dbeta != nullptr) dbeta[j] += a;
  const double g = gamma != nullptr ? gamma[j] : 1.0;
  const double d = static_cast<double>(rows);
  coef[j] = static_cast<float>(g * r);
  if (batch) {
    const double dvar = -0.5 * r * r * r * g * b;
    const double dmean = -r * g * a;
    coef[c + j] = static_cast<float>(dmean / d);
    coef[2 * c + j] = static_cast<float>(2.0 * dvar / d);
  } else {
    coef[c + j] = 0.0f;
    coef[2 * c + j] = 0.0f;
  }
}

template <typename T>
__global__ void BatchNormInputGradKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ coef, int64_t n, int64_t c,
                                         T* __restrict__ dx) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t j = i % c;
    const float v =
        ToFloat(dy[i]) * coef[j] + coef[c + j] + coef[2 * c + j] * (ToFloat(x[i]) - mean[j]);
    dx[i] = FromFloat<T>(v);
  }
}

// One warp per row.
template <typename T>
__global__ void LayerNormForwardKernel(const T* __restrict__ x, int64_t rows, int64_t g,
                                       const float* __restrict__ gamma,
                                       const float* __restrict__ beta, float epsilon,
                                       float* __restrict__ mean, float* __restrict__ rstd,
                                       T* __restrict__ y) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  const T* xr = x + row * g;
  T* yr = y + row * g;
  float sum = 0.0f;
  for (int64_t j = lane; j < g; j += kWarp) sum += ToFloat(xr[j]);
  const float mu = WarpSum(sum) / static_cast<float>(g);
  float sq = 0.0f;
  for (int64_t j = lane; j < g; j += kWarp) {
    const float v = ToFloat(xr[j]) - mu;
    sq += v * v;
  }
  const float rs = 1.0f / sqrtf(WarpSum(sq) / static_cast<float>(g) + epsilon);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
  for (int64_t j = lane; j < g; j += kWarp) {
    float v = (ToFloat(xr[j]) - mu) * rs;
    if (gamma != nullptr) v *= gamma[j];
    if (beta != nullptr) v += beta[j];
    yr[j] = FromFloat<T>(v);
  }
}

template <typename T>
__global__ void LayerNormInputGradKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                         int64_t rows, int64_t g, const float* __restrict__ gamma,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ rstd, T* __restrict__ dx) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  const T* xr = x + row * g;
  const T* gr = dy + row * g;
  const float mu = mean[row], rs = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t j = lane; j < g; j += kWarp) {
    const float xhat = (ToFloat(xr[j]) - mu) * rs;
    const float gj = ToFloat(gr[j]) * (gamma != nullptr ? gamma[j] : 1.0f);
    sg += gj;
    sgx += gj * xhat;
  }
  const float mg = WarpSum(sg) / static_cast<float>(g);
  const float mgx = WarpSum(sgx) / static_cast<float>(g);
  T* dr = dx + row * g;
  for (int64_t j = lane; j < g; j += kWarp) {
    const float xhat = (ToFloat(xr[j]) - mu) * rs;
    const float gj = ToFloat(gr[j]) * (gamma != nullptr ? gamma[j] : 1.0f);
    dr[j] = FromFloat<T>(rs * (gj - mg - xhat * mgx));
  }
}

__global__ void AccumulateKernel(const float* __restrict__ src, int64_t n,
                                 float* __restrict__ dst) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n && dst != nullptr) dst[i] += src[i];
}

unsigned int RowBlocks(int64_t rows) {
  return static_cast<unsigned int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

absl::Status CheckChannels(const DeviceTensor& x, int64_t c, const char* op) {
  if (c <= 0 || x.size() % c != 0) {
    return absl::InvalidArgumentError(std::string(op) + ": " + std::to_string(x.size()) +
                                      " elements are not rows of " + std::to_string(c));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BatchNormForward(GpuContext* ctx, const DeviceTensor& x, const float* gamma,
                              const float* beta, const BatchNormParams& p, float* moving_mean,
                              float* moving_variance, float* mean, float* rstd, DeviceTensor* y) {
  if (absl::Status st = CheckChannels(x, p.channels, "BatchNormForward"); !st.ok()) return st;
  const int64_t c = p.channels, rows = x.size() / c;
  if (absl::Status st = y->Resize(ctx, x.shape(), x.dtype()); !st.ok()) return st;
  absl::StatusOr<DeviceTensor> scratch = DeviceTensor::Make(ctx, {3, c}, DType::kF32);
  if (!scratch.ok()) return scratch.status();
  float* sq = scratch->as<float>();
  float* scale = sq + c;
  float* shift = sq + 2 * c;
  absl::Status st = absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    if (p.batch_statistics && rows > 0) {
      st.Update(ChannelSums<1>(ctx, SumX<T>{x.as<T>(), c}, rows, c, mean));
      if (!st.ok()) return 0;
      MeanKernel<<<Blocks(c), kThreads, 0, ctx->stream()>>>(mean, rows, c);
      st.Update(ChannelSums<1>(ctx, SumSquaredDeviation<T>{x.as<T>(), mean, c}, rows, c, sq));
      if (!st.ok()) return 0;
    }
    BatchNormParams q = p;
    q.batch_statistics = p.batch_statistics && rows > 0;
    BatchNormStatsKernel<<<Blocks(c), kThreads, 0, ctx->stream()>>>(
        sq, rows, c, q, gamma, beta, moving_mean, moving_variance, mean, rstd, scale, shift);
    if (x.size() > 0) {
      ScaleShiftKernel<T><<<Blocks(x.size()), kThreads, 0, ctx->stream()>>>(
          x.as<T>(), scale, shift, x.size(), c, y->as<T>());
    }
    return 0;
  });
  if (!st.ok()) return st;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status BatchNormBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& dy,
                               const float* gamma, const float* mean, const float* rstd,
                               const BatchNormParams& p, float* dgamma, float* dbeta,
                               DeviceTensor* dx) {
  if (absl::Status st = CheckChannels(x, p.channels, "BatchNormBackward"); !st.ok()) return st;
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError("BatchNormBackward: x and dy differ in shape or dtype");
  }
  const int64_t c = p.channels, rows = x.size() / c;
  absl::StatusOr<DeviceTensor> scratch = DeviceTensor::Make(ctx, {5, c}, DType::kF32);
  if (!scratch.ok()) return scratch.status();
  float* sums = scratch->as<float>();  // [2, c]
  float* coef = sums + 2 * c;          // [3, c]
  absl::Status st = absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    if (rows == 0) {
      st.Update(
          LOCKSTEP_GPU_STATUS(cudaMemsetAsync(sums, 0, 2 * c * sizeof(float), ctx->stream())));
      if (!st.ok()) return 0;
    } else {
      st.Update(
          ChannelSums<2>(ctx, BatchNormGradSums<T>{x.as<T>(), dy.as<T>(), mean, c}, rows, c, sums));
      if (!st.ok()) return 0;
    }
    BatchNormGradKernel<<<Blocks(c), kThreads, 0, ctx->stream()>>>(
        sums, rows, c, p.batch_statistics, gamma, rstd, dgamma, dbeta, coef);
    if (dx != nullptr) {
      st.Update(dx->Resize(ctx, x.shape(), x.dtype()));
      if (!st.ok()) return 0;
      if (x.size() > 0) {
        BatchNormInputGradKernel<T><<<Blocks(x.size()), kThreads, 0, ctx->stream()>>>(
            x.as<T>(), dy.as<T>(), mean, coef, x.size(), c, dx->as<T>());
      }
    }
    return 0;
  });
  if (!st.ok()) return st;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LayerNormForward(GpuContext* ctx, const DeviceTensor& x, int64_t group,
                              const float* gamma, const float* beta, float epsilon, float* mean,
                              float* rstd, DeviceTensor* y) {
  if (absl::Status st = CheckChannels(x, group, "LayerNormForward"); !st.ok()) return st;
  const int64_t rows = x.size() / group;
  if (absl::Status st = y->Resize(ctx, x.shape(), x.dtype()); !st.ok()) return st;
  if (rows == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    LayerNormForwardKernel<T><<<RowBlocks(rows), kThreads, 0, ctx->stream()>>>(
        x.as<T>(), rows, group, gamma, beta, epsilon, mean, rstd, y->as<T>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LayerNormBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& dy,
                               int64_t group, const float* gamma, const float* mean,
                               const float* rstd, float* dgamma, float* dbeta, DeviceTensor* dx) {
  if (absl::Status st = CheckChannels(x, group, "LayerNormBackward"); !st.ok()) return st;
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError("LayerNormBackward: x and dy differ in shape or dtype");
  }
  const int64_t rows = x.size() / group;
  if (dx != nullptr) {
    if (absl::Status s = dx->Resize(ctx, x.shape(), x.dtype()); !s.ok()) return s;
  }
  if (rows == 0) return absl::OkStatus();
  absl::Status st = absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    if (dgamma != nullptr || dbeta != nullptr) {
      absl::StatusOr<DeviceTensor> sums = DeviceTensor::Make(ctx, {2, group}, DType::kF32);
      if (!sums.ok()) {
        st.Update(sums.status());
        return 0;
      }
      st.Update(ChannelSums<2>(ctx, LayerNormParamSums<T>{x.as<T>(), dy.as<T>(), mean, rstd, group},
                               rows, group, sums->as<float>()));
      if (!st.ok()) return 0;
      AccumulateKernel<<<Blocks(group), kThreads, 0, ctx->stream()>>>(sums->as<float>(), group,
                                                                      dgamma);
      AccumulateKernel<<<Blocks(group), kThreads, 0, ctx->stream()>>>(sums->as<float>() + group,
                                                                      group, dbeta);
    }
    if (dx != nullptr) {
      LayerNormInputGradKernel<T><<<RowBlocks(rows), kThreads, 0, ctx->stream()>>>(
          x.as<T>(), dy.as<T>(), rows, group, gamma, mean, rstd, dx->as<T>());
    }
    return 0;
  });
  if (!st.ok()) return st;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
