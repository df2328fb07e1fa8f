#include "trainer/kernels/cuda/activation.h"

#include "trainer/kernels/cuda/activation.cuh"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"

namespace lockstep::trainer::cuda {
namespace {

using act::ActBackward;
using act::ActForward;

template <typename T>
__global__ void ForwardKernel(Act k, float alpha, const T* __restrict__ z, T* __restrict__ y,
                              int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = FromFloat<T>(ActForward(k, alpha, ToFloat(z[i])));
  }
}

template <typename T>
__global__ void BackwardKernel(Act k, float alpha, const T* __restrict__ z, const T* __restrict__ y,
                               const T* __restrict__ dy, T* __restrict__ dz, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    dz[i] = FromFloat<T>(ActBackward(k, alpha, ToFloat(z[i]), ToFloat(y[i]), ToFloat(dy[i])));
  }
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

absl::Status ActivationForward(GpuContext* ctx, const Activation& a, const DeviceTensor& z,
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

absl::Status ActivationBackward(GpuContext* ctx, const Activation& a, const DeviceTensor& z,
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
