#pragma once
// The graph's pooling layers on the GPU, with the CPU layers' semantics
// (trainer/layers/pooling/pooling.h), on channels-last data [n, spatial..., c]:
//   PoolForward/PoolBackward  Max/AveragePooling1D-3D over the window geometry the CPU layer
//                             uses (cpu::ConvGeometry with c_in == c_out, dilation 1; Keras's
//                             "same" padding, more at the end); an average divides by the
//                             real inputs of its window, as TensorFlow does; a max passes its
//                             gradient to the first largest input of the window.
//   GlobalPoolForward/Backward  over every spatial position: [n, steps, c] -> [n, c]; an
//                             average with a mask (GlobalAveragePooling1D after Embedding
//                             mask_zero or Masking) is over each example's unmasked steps.
// The backward passes gather (each input sums the outputs whose window holds it), so no atomics
// and a run repeats bit for bit. Any storage dtype, fp32 arithmetic; arg-max indices are int32
// in a 4-byte DeviceTensor.
// Thread-safety: reentrant per context.

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/cpu/conv_geometry.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

enum class PoolKind { kMax, kAverage };

absl::Status PoolForward(GpuContext* ctx, const DeviceTensor& x, const cpu::ConvGeometry& g,
                         PoolKind kind, DeviceTensor* y, DeviceTensor* argmax);
absl::Status PoolBackward(GpuContext* ctx, const DeviceTensor& dy, const cpu::ConvGeometry& g,
                          PoolKind kind, const DeviceTensor& argmax, DeviceTensor* dx);

// x [n, steps, c] (the spatial axes flattened) -> y [n, c]. `mask` (fp32 [n, steps] of 0/1, or
// null) weighs an average; the max ignores it, as on the CPU. `saved` keeps what backward
// needs: the max's arg-max indices, or the masked average's weights.
absl::Status GlobalPoolForward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor* mask,
                               int64_t n, int64_t steps, int64_t c, PoolKind kind, DeviceTensor* y,
                               DeviceTensor* saved);
absl::Status GlobalPoolBackward(GpuContext* ctx, const DeviceTensor& dy, int64_t n, int64_t steps,
                                int64_t c, PoolKind kind, const DeviceTensor& saved,
                                DeviceTensor* dx);

}  // namespace lockstep::trainer::cuda
