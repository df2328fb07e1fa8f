#pragma once
// Device-side helpers shared by the .cu files: storage types for each DType, conversions to
// and from fp32, 16-byte packs, and the launch shape of the contiguous kernels.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

template <typename T>
__device__ __forceinline__ float ToFloat(T x);
template <>
__device__ __forceinline__ float ToFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Sixteen bytes of T: one vector load or store per thread.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kCount = 16 / sizeof(T);
  T v[kCount];
};

constexpr int kThreads = 256;

// Reductions across the 32 lanes of a warp (every lane gets the result): the row-per-warp
// kernels' sums and maxima.
inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = kThreads / kWarp;
template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Blocks for `work` items of kThreads each, capped (the kernels stride over the rest).
inline unsigned int Blocks(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > (int64_t{1} << 20)) b = int64_t{1} << 20;
  return static_cast<unsigned int>(b);
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Calls f(T{}) with the storage type of `t`.
template <typename F>
auto DispatchDType(DType t, F&& f) {
  switch (t) {
    case DType::kF16:
      return f(__half{});
    case DType::kBF16:
      return f(__nv_bfloat16{});
    case DType::kF32:
    default:
      return f(float{});
  }
}

}  // namespace lockstep::trainer::cuda
