#pragma once
// The graph's activations on the GPU: the counterparts of graph::ActivationForward and
// graph::ActivationBackward (trainer/graph/activation.h), argument for argument, with a
// GpuContext first and DeviceTensors for Tensors. Every activation the Keras loader accepts;
// softmax over the last axis (one warp per row). Storage in any dtype (y and dz take z's),
// arithmetic in fp32.
// Thread-safety: reentrant per context.

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/kernels/types.h"

namespace lockstep::trainer::cuda {

// y = act(z).
absl::Status ActivationForward(GpuContext* ctx, const Activation& a, const DeviceTensor& z,
                               DeviceTensor* y);
// dz = dL/dz from z, y = act(z) and dy = dL/dy.
absl::Status ActivationBackward(GpuContext* ctx, const Activation& a, const DeviceTensor& z,
                                const DeviceTensor& y, const DeviceTensor& dy, DeviceTensor* dz);

}  // namespace lockstep::trainer::cuda
