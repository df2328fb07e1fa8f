// PReLU's CUDA kernels (declared in prelu_gpu.cc): alpha of `alpha_size` fp32 values repeats
// along the leading axes of x (any storage dtype), element i using alpha[i % alpha_size].
#include "absl/status/status.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"

namespace lockstep::trainer::cuda {
namespace {

template <typename T>
__global__ void PReluForwardKernel(const T* __restrict__ x, const float* __restrict__ alpha,
                                   int64_t n, int64_t alpha_size, T* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = ToFloat(x[i]);
    y[i] = FromFloat<T>(v >= 0.0f ? v : alpha[i % alpha_size] * v);
  }
}

// dx (may be null) = dy or alpha * dy; t = dy * x where x < 0, else 0 (fp32), which the caller
// reduces over the leading axes into alpha's gradient.
template <typename T>
__global__ void PReluBackwardKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                    const float* __restrict__ alpha, int64_t n, int64_t alpha_size,
                                    T* __restrict__ dx, float* __restrict__ t) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = ToFloat(x[i]), g = ToFloat(dy[i]);
    const bool pos = v >= 0.0f;
    if (dx != nullptr) dx[i] = FromFloat<T>(pos ? g : alpha[i % alpha_size] * g);
    t[i] = pos ? 0.0f : g * v;
  }
}

}  // namespace

absl::Status PReluForward(GpuContext* ctx, const DeviceTensor& x, const float* alpha,
                          int64_t alpha_size, DeviceTensor* y) {
  if (alpha_size <= 0 || x.size() % alpha_size != 0) {
    return absl::InvalidArgumentError("PReluForward: alpha of " + std::to_string(alpha_size) +
                                      " values does not tile x " + ShapeString(x.shape()));
  }
  LOCKSTEP_RETURN_IF_ERROR(y->Resize(ctx, x.shape(), x.dtype()));
  const int64_t n = x.size();
  if (n == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto z) {
    using T = decltype(z);
    PReluForwardKernel<T>
        <<<Blocks(n), kThreads, 0, ctx->stream()>>>(x.as<T>(), alpha, n, alpha_size, y->as<T>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status PReluBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& dy,
                           const float* alpha, int64_t alpha_size, DeviceTensor* dx,
                           DeviceTensor* t) {
  if (alpha_size <= 0 || x.size() % alpha_size != 0 || dy.shape() != x.shape() ||
      dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError("PReluBackward: x " + ShapeString(x.shape()) + ", dy " +
                                      ShapeString(dy.shape()) + " and alpha of " +
                                      std::to_string(alpha_size) + " values do not match");
  }
  if (dx != nullptr) LOCKSTEP_RETURN_IF_ERROR(dx->Resize(ctx, x.shape(), x.dtype()));
  LOCKSTEP_RETURN_IF_ERROR(t->Resize(ctx, x.shape(), DType::kF32));
  const int64_t n = x.size();
  if (n == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto z) {
    using T = decltype(z);
    PReluBackwardKernel<T><<<Blocks(n), kThreads, 0, ctx->stream()>>>(
        x.as<T>(), dy.as<T>(), alpha, n, alpha_size, dx != nullptr ? dx->as<T>() : nullptr,
        t->as<float>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
