#include "trainer/kernels/cuda/activation.h"

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"

namespace lockstep::trainer::cuda {
namespace {

using graph::Act;

constexpr float kSeluAlpha = 1.6732632423543772f;
constexpr float kSeluScale = 1.0507009873554805f;
constexpr float kSqrt2OverPi = 0.7978845608028654f;

__device__ __forceinline__ float Sig(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float Clamp(float x, float lo, float hi) {
  return fminf(fmaxf(x, lo), hi);
}

// One element of each activation but softmax, as activation.cc computes it.
__device__ __forceinline__ float Forward(Act k, float alpha, float z) {
  switch (k) {
    case Act::kLinear:
      return z;
    case Act::kRelu:
      return fmaxf(z, 0.0f);
    case Act::kRelu6:
      return Clamp(z, 0.0f, 6.0f);
    case Act::kSigmoid:
      return Sig(z);
    case Act::kHardSigmoid2:
      return Clamp(0.2f * z + 0.5f, 0.0f, 1.0f);
    case Act::kHardSigmoid3:
      return Clamp(z / 6.0f + 0.5f, 0.0f, 1.0f);
    case Act::kTanh:
      return tanhf(z);
    case Act::kSwish:
      return z * Sig(z);
    case Act::kGelu:
      return 0.5f * z * (1.0f + erff(z * 0.7071067811865476f));
    case Act::kGeluTanh:
      return 0.5f * z * (1.0f + tanhf(kSqrt2OverPi * (z + 0.044715f * z * z * z)));
    case Act::kElu:
      return z > 0 ? z : alpha * expm1f(z);
    case Act::kSelu:
      return kSeluScale * (z > 0 ? z : kSeluAlpha * expm1f(z));
    case Act::kSoftplus:
      return Softplus(z);
    case Act::kSoftsign:
      return z / (1.0f + fabsf(z));
    case Act::kExponential:
      return expf(z);
    case Act::kLeakyRelu:
      return z > 0 ? z : alpha * z;
    case Act::kHardSwish:
      return z * Clamp(z / 6.0f + 0.5f, 0.0f, 1.0f);
    case Act::kMish:
      return z * tanhf(Softplus(z));
    case Act::kSoftmax:
      break;  // rows: SoftmaxForward
  }
  return z;
}

__device__ __forceinline__ float Backward(Act k, float alpha, float z, float y, float g) {
  switch (k) {
    case Act::kLinear:
      return g;
    case Act::kRelu:
      return z > 0 ? g : 0.0f;
    case Act::kRelu6:
      return (z > 0 && z < 6) ? g : 0.0f;
    case Act::kSigmoid:
      return g * y * (1.0f - y);
    case Act::kHardSigmoid2: {
      const float t = 0.2f * z + 0.5f;
      return (t > 0 && t < 1) ? 0.2f * g : 0.0f;
    }
    case Act::kHardSigmoid3: {
      const float t = z / 6.0f + 0.5f;
      return (t > 0 && t < 1) ? g / 6.0f : 0.0f;
    }
    case Act::kTanh:
      return g * (1.0f - y * y);
    case Act::kSwish: {
      const float s = Sig(z);
      return g * (s + z * s * (1.0f - s));
    }
    case Act::kGelu: {
      const float cdf = 0.5f * (1.0f + erff(z * 0.7071067811865476f));
      const float pdf = 0.3989422804014327f * expf(-0.5f * z * z);
      return g * (cdf + z * pdf);
    }
    case Act::kGeluTanh: {
      const float u = kSqrt2OverPi * (z + 0.044715f * z * z * z);
      const float t = tanhf(u);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * z * z);
      return g * (0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * du);
    }
    case Act::kElu:
      return z > 0 ? g : g * (y + alpha);
    case Act::kSelu:
      return z > 0 ? g * kSeluScale : g * (y + kSeluScale * kSeluAlpha);
    case Act::kSoftplus:
      return g * Sig(z);
    case Act::kSoftsign: {
      const float q = 1.0f + fabsf(z);
      return g / (q * q);
    }
    case Act::kExponential:
      return g * y;
    case Act::kLeakyRelu:
      return z > 0 ? g : alpha * g;
    case Act::kHardSwish:
      return z < -3 ? 0.0f : z > 3 ? g : g * (z / 3.0f + 0.5f);
    case Act::kMish: {
      const float t = tanhf(Softplus(z));
      return g * (t + z * (1.0f - t * t) * Sig(z));
    }
    case Act::kSoftmax:
      break;  // rows: SoftmaxBackward
  }
  return g;
}

template <typename T>
__global__ void ForwardKernel(Act k, float alpha, const T* __restrict__ z, T* __restrict__ y,
                              int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = FromFloat<T>(Forward(k, alpha, ToFloat(z[i])));
  }
}

template <typename T>
__global__ void BackwardKernel(Act k, float alpha, const T* __restrict__ z, const T* __restrict__ y,
                               const T* __restrict__ dy, T* __restrict__ dz, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    dz[i] = FromFloat<T>(Backward(k, alpha, ToFloat(z[i]), ToFloat(y[i]), ToFloat(dy[i])));
  }
}

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per row of `c` values: the maximum, the sum of exponentials, then the outputs.
template <typename T>
__global__ void SoftmaxForwardKernel(const T* __restrict__ z, T* __restrict__ y, int64_t rows,
                                     int64_t c) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  const T* zr = z + row * c;
  T* yr = y + row * c;
  float m = -INFINITY;
  for (int64_t j = lane; j < c; j += kWarp) m = fmaxf(m, ToFloat(zr[j]));
  m = WarpMax(m);
  float sum = 0.0f;
  for (int64_t j = lane; j < c; j += kWarp) sum += expf(ToFloat(zr[j]) - m);
  sum = WarpSum(sum);
  for (int64_t j = lane; j < c; j += kWarp) yr[j] = FromFloat<T>(expf(ToFloat(zr[j]) - m) / sum);
}

// dz = y (dy - sum(y dy)) per row.
template <typename T>
__global__ void SoftmaxBackwardKernel(const T* __restrict__ y, const T* __restrict__ dy,
                                      T* __restrict__ dz, int64_t rows, int64_t c) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  const T* yr = y + row * c;
  const T* gr = dy + row * c;
  T* dr = dz + row * c;
  float dot = 0.0f;
  for (int64_t j = lane; j < c; j += kWarp) dot += ToFloat(yr[j]) * ToFloat(gr[j]);
  dot = WarpSum(dot);
  for (int64_t j = lane; j < c; j += kWarp) {
    dr[j] = FromFloat<T>(ToFloat(yr[j]) * (ToFloat(gr[j]) - dot));
  }
}

unsigned int RowBlocks(int64_t rows) {
  return static_cast<unsigned int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

int64_t LastAxis(const Shape& s) { return s.empty() ? 1 : s.back(); }

absl::Status Launched() {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status ActivationForward(GpuContext* ctx, const graph::Activation& a, const DeviceTensor& z,
                               DeviceTensor* y) {
  if (absl::Status st = y->Resize(ctx, z.shape(), z.dtype()); !st.ok()) return st;
  const int64_t n = z.size();
  if (n == 0) return absl::OkStatus();
  const int64_t c = LastAxis(z.shape());
  DispatchDType(z.dtype(), [&](auto t) {
    using T = decltype(t);
    if (a.kind == Act::kSoftmax) {
      SoftmaxForwardKernel<T>
          <<<RowBlocks(n / c), kThreads, 0, ctx->stream()>>>(z.as<T>(), y->as<T>(), n / c, c);
    } else {
      ForwardKernel<T>
          <<<Blocks(n), kThreads, 0, ctx->stream()>>>(a.kind, a.alpha, z.as<T>(), y->as<T>(), n);
    }
    return 0;
  });
  return Launched();
}

absl::Status ActivationBackward(GpuContext* ctx, const graph::Activation& a, const DeviceTensor& z,
                                const DeviceTensor& y, const DeviceTensor& dy, DeviceTensor* dz) {
  if (y.shape() != z.shape() || dy.shape() != z.shape() || y.dtype() != z.dtype() ||
      dy.dtype() != z.dtype()) {
    return absl::InvalidArgumentError("ActivationBackward: z, y and dy differ in shape or dtype");
  }
  if (absl::Status st = dz->Resize(ctx, z.shape(), z.dtype()); !st.ok()) return st;
  const int64_t n = z.size();
  if (n == 0) return absl::OkStatus();
  const int64_t c = LastAxis(z.shape());
  DispatchDType(z.dtype(), [&](auto t) {
    using T = decltype(t);
    if (a.kind == Act::kSoftmax) {
      SoftmaxBackwardKernel<T><<<RowBlocks(n / c), kThreads, 0, ctx->stream()>>>(
          y.as<T>(), dy.as<T>(), dz->as<T>(), n / c, c);
    } else {
      BackwardKernel<T><<<Blocks(n), kThreads, 0, ctx->stream()>>>(
          a.kind, a.alpha, z.as<T>(), y.as<T>(), dy.as<T>(), dz->as<T>(), n);
    }
    return 0;
  });
  return Launched();
}

}  // namespace lockstep::trainer::cuda
