#pragma once
// Dropout and GaussianNoise's random draws on the GPU, counter-based (Philox 4x32-10): element
// i of a call draws from (seed, i), so the backward pass regenerates the forward pass's mask
// instead of storing it, and a run with one seed repeats. As Keras: each kept element is
// scaled by 1 / (1 - rate); a noise shape (size-1 axes broadcast, as Keras's noise_shape)
// shares one draw along its broadcast axes. The draws differ from the CPU's generator (the
// distribution, not the stream, is the contract), which is how Keras's backends differ too.
// Any storage dtype, fp32 arithmetic.
// Thread-safety: reentrant per context.

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

// `noise_shape`: empty (one draw per element) or x's rank with each axis x's length or 1.
absl::Status DropoutForward(GpuContext* ctx, const DeviceTensor& x, float rate,
                            const Shape& noise_shape, uint64_t seed, DeviceTensor* y);
// dx = dy where the forward pass with the same seed kept the element, scaled alike; else 0.
absl::Status DropoutBackward(GpuContext* ctx, const DeviceTensor& dy, float rate,
                             const Shape& noise_shape, uint64_t seed, DeviceTensor* dx);

// y = x + stddev * N(0, 1) per element (GaussianNoise in training; its gradient is dy).
absl::Status GaussianNoise(GpuContext* ctx, const DeviceTensor& x, float stddev, uint64_t seed,
                           DeviceTensor* y);

}  // namespace lockstep::trainer::cuda
