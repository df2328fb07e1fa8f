#pragma once
// The masks of sequence models on the GPU, with the CPU layers' semantics
// (layers/masking/, layers/rnn/rnn.h): a mask is fp32 [batch, time] of 0/1 and follows a
// tensor from the layer that makes it (Embedding with mask_zero, Masking, a mask= argument) to the
// layers that honour it (recurrent layers, GlobalAveragePooling1D, MultiHeadAttention).
//   CompareForward   y = 1 where `x op constant` holds, else 0, in any output dtype: Keras 3's
//                    comparison layers, and Embedding mask_zero's mask (ids != 0).
//   MaskingForward   Keras's Masking: a row (time step) whose features all equal `value` is
//                    zeroed, and 0 in the mask; MaskingBackward passes dy through the mask.
// Any storage dtype, fp32 comparisons.
// Thread-safety: reentrant per context.

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/kernels/types.h"

namespace lockstep::trainer::cuda {

// y (x's shape, `dtype`) = x op constant ? 1 : 0.
absl::Status CompareForward(GpuContext* ctx, const DeviceTensor& x, CompareOp op, float constant,
                            DType dtype, DeviceTensor* y);

// x [b, t, features...] -> y (x's shape and dtype) and mask [b, t].
absl::Status MaskingForward(GpuContext* ctx, const DeviceTensor& x, float value, DeviceTensor* y,
                            DeviceTensor* mask);
// dx = dy times its row's mask.
absl::Status MaskingBackward(GpuContext* ctx, const DeviceTensor& dy, const DeviceTensor& mask,
                             DeviceTensor* dx);

}  // namespace lockstep::trainer::cuda
