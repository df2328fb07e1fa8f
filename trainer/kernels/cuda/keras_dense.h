#pragma once
// The graph's Dense layer on the GPU (the linear part; the activation is activation.h's): the
// counterpart of the CPU layer (trainer/layers/core/core.h), on Keras's kernel layout
// [in, units] over the last axis of an input of any rank, through cuBLAS (cuda::Gemm: fp32,
// TF32 where the context allows, or 16-bit inputs with fp32 sums).
// Thread-safety: reentrant per context.

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

// y [..., units] = x [..., in] kernel (+ b, fp32, when not null); x and kernel share a dtype.
absl::Status KerasDenseForward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& kernel,
                               const float* b, DeviceTensor* y);
// dx (may be null) = dy kernel^T; dkernel (fp32 [in, units]) and db (fp32, may be null)
// overwritten.
absl::Status KerasDenseBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& kernel,
                                const DeviceTensor& dy, DeviceTensor* dx, float* dkernel,
                                float* db);

}  // namespace lockstep::trainer::cuda
