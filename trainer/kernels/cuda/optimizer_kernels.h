#pragma once
// The optimizer updates as fused CUDA kernels over flat fp32 buffers (all of a model's
// parameters in one launch): each reads the gradient once, multiplies it by `grad_factor`
// (1 / (loss scale * replicas): the unscaling and the average folded into the update), updates
// the fp32 master weights and state, and, for mixed precision, writes the 16-bit compute copy
// of the weights in the same pass. The arithmetic is the CPU optimizers' (trainer/optim/).
// Thread-safety: reentrant per context.

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

struct UpdateArgs {
  float* params = nullptr;  // fp32 master weights
  const float* grads = nullptr;
  int64_t n = 0;
  float grad_factor = 1.0f;
  void* compute_copy = nullptr;  // null, or n elements of `compute_type` to refresh
  DType compute_type = DType::kF32;
};

// v = momentum * v + g; p -= lr * v (v may be null when momentum is 0).
absl::Status SgdUpdate(GpuContext* ctx, const UpdateArgs& a, float* velocity, float lr,
                       float momentum);
// Adam with the CPU optimizer's bias correction: step_size = lr * sqrt(1 - b2^t) / (1 - b1^t),
// eps_hat = epsilon * sqrt(1 - b2^t).
absl::Status AdamUpdate(GpuContext* ctx, const UpdateArgs& a, float* m, float* v, float beta1,
                        float beta2, float step_size, float eps_hat);

}  // namespace lockstep::trainer::cuda
