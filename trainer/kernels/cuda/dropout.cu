#include "trainer/kernels/cuda/dropout.h"

#include <curand_kernel.h>

#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/index.cuh"

namespace lockstep::trainer::cuda {
namespace {

struct NoiseMap {
  BShape x, noise;
  bool full = true;  // one draw per element
};

// The draw index of element i: i itself, or its index in the noise shape.
__device__ __forceinline__ int64_t DrawIndex(const NoiseMap& m, int64_t i) {
  return m.full ? i : BroadcastIndex(m.x, m.noise, i);
}

__device__ __forceinline__ float Uniform(uint64_t seed, int64_t draw) {
  curandStatePhilox4_32_10_t s;
  curand_init(seed, static_cast<unsigned long long>(draw), 0, &s);
  return curand_uniform(&s);  // (0, 1]
}

template <typename T>
__global__ void DropoutKernel(const T* __restrict__ x, int64_t n, float rate, NoiseMap m,
                              uint64_t seed, T* __restrict__ y) {
  const float scale = 1.0f / (1.0f - rate);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    // Kept with probability 1 - rate: u in (0, 1] above rate.
    const bool keep = Uniform(seed, DrawIndex(m, i)) > rate;
    y[i] = FromFloat<T>(keep ? ToFloat(x[i]) * scale : 0.0f);
  }
}

template <typename T>
__global__ void GaussianKernel(const T* __restrict__ x, int64_t n, float stddev, uint64_t seed,
                               T* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    curandStatePhilox4_32_10_t s;
    curand_init(seed, static_cast<unsigned long long>(i), 0, &s);
    y[i] = FromFloat<T>(ToFloat(x[i]) + stddev * curand_normal(&s));
  }
}

absl::StatusOr<NoiseMap> MapOf(const Shape& x, const Shape& noise) {
  NoiseMap m;
  if (x.size() > static_cast<size_t>(kMaxBroadcastRank)) {
    return absl::InvalidArgumentError("Dropout: rank above " + std::to_string(kMaxBroadcastRank));
  }
  m.x = ShapeOf(x);
  if (noise.empty()) return m;
  if (noise.size() != x.size()) {
    return absl::InvalidArgumentError("Dropout: noise shape " + ShapeString(noise) +
                                      " does not match input " + ShapeString(x));
  }
  for (size_t a = 0; a < x.size(); ++a) {
    if (noise[a] != 1 && noise[a] != x[a]) {
      return absl::InvalidArgumentError("Dropout: noise shape " + ShapeString(noise) +
                                        " does not broadcast to " + ShapeString(x));
    }
  }
  m.noise = ShapeOf(noise);
  m.full = false;
  return m;
}

absl::Status Run(GpuContext* ctx, const DeviceTensor& in, float rate, const Shape& noise,
                 uint64_t seed, DeviceTensor* out) {
  if (!(rate >= 0.0f && rate < 1.0f)) {
    return absl::InvalidArgumentError("Dropout: rate " + std::to_string(rate) +
                                      " is outside [0, 1)");
  }
  absl::StatusOr<NoiseMap> m = MapOf(in.shape(), noise);
  if (!m.ok()) return m.status();
  if (absl::Status s = out->Resize(ctx, in.shape(), in.dtype()); !s.ok()) return s;
  if (in.size() == 0) return absl::OkStatus();
  DispatchDType(in.dtype(), [&](auto t) {
    using T = decltype(t);
    DropoutKernel<T><<<Blocks(in.size()), kThreads, 0, ctx->stream()>>>(in.as<T>(), in.size(), rate,
                                                                        *m, seed, out->as<T>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status DropoutForward(GpuContext* ctx, const DeviceTensor& x, float rate,
                            const Shape& noise_shape, uint64_t seed, DeviceTensor* y) {
  return Run(ctx, x, rate, noise_shape, seed, y);
}

// The mask and scale are the forward pass's, so the backward pass is the same kernel on dy.
absl::Status DropoutBackward(GpuContext* ctx, const DeviceTensor& dy, float rate,
                             const Shape& noise_shape, uint64_t seed, DeviceTensor* dx) {
  return Run(ctx, dy, rate, noise_shape, seed, dx);
}

absl::Status GaussianNoise(GpuContext* ctx, const DeviceTensor& x, float stddev, uint64_t seed,
                           DeviceTensor* y) {
  if (absl::Status s = y->Resize(ctx, x.shape(), x.dtype()); !s.ok()) return s;
  if (x.size() == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    GaussianKernel<T><<<Blocks(x.size()), kThreads, 0, ctx->stream()>>>(x.as<T>(), x.size(), stddev,
                                                                        seed, y->as<T>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
