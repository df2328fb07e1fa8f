#include "trainer/kernels/cuda/masking.h"

#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"

namespace lockstep::trainer::cuda {
namespace {

__device__ __forceinline__ bool Holds(CompareOp op, float v, float c) {
  switch (op) {
    case CompareOp::kEqual:
      return v == c;
    case CompareOp::kNotEqual:
      return v != c;
    case CompareOp::kGreater:
      return v > c;
    case CompareOp::kGreaterEqual:
      return v >= c;
    case CompareOp::kLess:
      return v < c;
    case CompareOp::kLessEqual:
      return v <= c;
  }
  return false;
}

template <typename In, typename Out>
__global__ void CompareKernel(const In* __restrict__ x, int64_t n, CompareOp op, float c,
                              Out* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = FromFloat<Out>(Holds(op, ToFloat(x[i]), c) ? 1.0f : 0.0f);
  }
}

// One warp per row of `f` features: the row's mask, then the row kept or zeroed.
template <typename T>
__global__ void MaskingKernel(const T* __restrict__ x, int64_t rows, int64_t f, float value,
                              T* __restrict__ y, float* __restrict__ mask) {
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  const T* xr = x + row * f;
  float differs = 0;
  for (int64_t j = lane; j < f; j += kWarp) differs += ToFloat(xr[j]) != value ? 1.0f : 0.0f;
  const bool keep = WarpSum(differs) > 0;
  for (int64_t j = lane; j < f; j += kWarp) y[row * f + j] = keep ? xr[j] : FromFloat<T>(0.0f);
  if (lane == 0) mask[row] = keep ? 1.0f : 0.0f;
}

template <typename T>
__global__ void MaskRowsKernel(const T* __restrict__ dy, const float* __restrict__ mask, int64_t n,
                               int64_t f, T* __restrict__ dx) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    dx[i] = mask[i / f] != 0.0f ? dy[i] : FromFloat<T>(0.0f);
  }
}

unsigned int RowBlocks(int64_t rows) {
  return static_cast<unsigned int>((rows * kWarp + kThreads - 1) / kThreads);
}

}  // namespace

absl::Status CompareForward(GpuContext* ctx, const DeviceTensor& x, CompareOp op, float constant,
                            DType dtype, DeviceTensor* y) {
  LOCKSTEP_RETURN_IF_ERROR(y->Resize(ctx, x.shape(), dtype));
  if (x.size() == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto in_tag) {
    using In = decltype(in_tag);
    DispatchDType(dtype, [&](auto out_tag) {
      using Out = decltype(out_tag);
      CompareKernel<In, Out><<<Blocks(x.size()), kThreads, 0, ctx->stream()>>>(
          x.as<In>(), x.size(), op, constant, y->as<Out>());
      return 0;
    });
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status MaskingForward(GpuContext* ctx, const DeviceTensor& x, float value, DeviceTensor* y,
                            DeviceTensor* mask) {
  if (x.shape().size() < 2) {
    return absl::InvalidArgumentError("Masking: the input " + ShapeString(x.shape()) +
                                      " is not [batch, time, ...]");
  }
  const int64_t rows = x.dim(0) * x.dim(1);
  const int64_t f = rows == 0 ? 0 : x.size() / rows;
  LOCKSTEP_RETURN_IF_ERROR(y->Resize(ctx, x.shape(), x.dtype()));
  LOCKSTEP_RETURN_IF_ERROR(mask->Resize(ctx, {x.dim(0), x.dim(1)}, DType::kF32));
  if (rows == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    MaskingKernel<T><<<RowBlocks(rows), kThreads, 0, ctx->stream()>>>(
        x.as<T>(), rows, f, value, y->as<T>(), mask->as<float>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status MaskingBackward(GpuContext* ctx, const DeviceTensor& dy, const DeviceTensor& mask,
                             DeviceTensor* dx) {
  const int64_t rows = mask.size();
  if (rows > 0 ? dy.size() % rows != 0 : dy.size() != 0) {
    return absl::InvalidArgumentError("Masking: the gradient " + ShapeString(dy.shape()) +
                                      " does not fit the mask " + ShapeString(mask.shape()));
  }
  LOCKSTEP_RETURN_IF_ERROR(dx->Resize(ctx, dy.shape(), dy.dtype()));
  if (dy.size() == 0) return absl::OkStatus();
  DispatchDType(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    MaskRowsKernel<T><<<Blocks(dy.size()), kThreads, 0, ctx->stream()>>>(
        dy.as<T>(), mask.as<float>(), dy.size(), dy.size() / rows, dx->as<T>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
