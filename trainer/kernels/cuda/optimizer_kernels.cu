#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/optimizer_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

template <typename C>
__device__ __forceinline__ void StoreCopy(void* copy, int64_t i, float p) {
  if (copy != nullptr) static_cast<C*>(copy)[i] = FromFloat<C>(p);
}

template <typename C>
__global__ void SgdKernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v,
                          int64_t n, float factor, float lr, float momentum,
                          void* __restrict__ copy) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float grad = g[i] * factor;
    float step = grad;
    if (v != nullptr) {
      step = momentum * v[i] + grad;
      v[i] = step;
    }
    const float w = p[i] - lr * step;
    p[i] = w;
    StoreCopy<C>(copy, i, w);
  }
}

template <typename C>
__global__ void AdamKernel(float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ m, float* __restrict__ v, int64_t n, float factor,
                           float beta1, float beta2, float step_size, float eps_hat,
                           void* __restrict__ copy) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float grad = g[i] * factor;
    const float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    const float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const float w = p[i] - step_size * mi / (sqrtf(vi) + eps_hat);
    p[i] = w;
    StoreCopy<C>(copy, i, w);
  }
}

}  // namespace

absl::Status SgdUpdate(GpuContext* ctx, const UpdateArgs& a, float* velocity, float lr,
                       float momentum) {
  if (a.n == 0) return absl::OkStatus();
  float* v = momentum == 0.0f ? nullptr : velocity;
  DispatchDType(a.compute_type, [&](auto c) {
    using C = decltype(c);
    SgdKernel<C><<<Blocks(a.n), kThreads, 0, ctx->stream()>>>(
        a.params, a.grads, v, a.n, a.grad_factor, lr, momentum, a.compute_copy);
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status AdamUpdate(GpuContext* ctx, const UpdateArgs& a, float* m, float* v, float beta1,
                        float beta2, float step_size, float eps_hat) {
  if (a.n == 0) return absl::OkStatus();
  DispatchDType(a.compute_type, [&](auto c) {
    using C = decltype(c);
    AdamKernel<C><<<Blocks(a.n), kThreads, 0, ctx->stream()>>>(a.params, a.grads, m, v, a.n,
                                                               a.grad_factor, beta1, beta2,
                                                               step_size, eps_hat, a.compute_copy);
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
