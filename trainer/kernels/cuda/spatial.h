#pragma once
// The graph's spatial shape layers on the GPU, with the CPU layers' semantics
// (trainer/layers/reshaping/reshaping.h), on channels-last data [n, spatial..., c] with 1 to 3
// spatial axes:
//   PadOrCrop         ZeroPadding (positive before/after) and Cropping (negative) per axis; each
//                     is the other's gradient, with the amounts negated.
//   UpsampleNearest   each axis repeated size times; the backward pass sums each block.
//   UpsampleBilinear2d  TensorFlow's half-pixel bilinear resize (edges clamped), and its
//                     gradient gathered per input pixel (no atomics).
// Any storage dtype, fp32 arithmetic.
// Thread-safety: reentrant per context.

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

using Axes3 = std::array<int64_t, 3>;  // per spatial axis, the first `rank` used

absl::Status PadOrCrop(GpuContext* ctx, const DeviceTensor& x, int rank, const Axes3& before,
                       const Axes3& after, DeviceTensor* y);

absl::Status UpsampleNearest(GpuContext* ctx, const DeviceTensor& x, int rank, const Axes3& size,
                             DeviceTensor* y);
// dx [n, in..., c] from dy [n, in * size..., c].
absl::Status UpsampleNearestBackward(GpuContext* ctx, const DeviceTensor& dy, int rank,
                                     const Axes3& size, DeviceTensor* dx);

// x [n, h, w, c] -> y [n, out_h, out_w, c].
absl::Status UpsampleBilinear2d(GpuContext* ctx, const DeviceTensor& x, int64_t out_h,
                                int64_t out_w, DeviceTensor* y);
// dx [n, in_h, in_w, c] from dy [n, out_h, out_w, c].
absl::Status UpsampleBilinear2dBackward(GpuContext* ctx, const DeviceTensor& dy, int64_t in_h,
                                        int64_t in_w, DeviceTensor* dx);

}  // namespace lockstep::trainer::cuda
