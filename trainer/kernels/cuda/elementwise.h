#pragma once
// The elementwise and reduction kernels the layers and the optimizers share. Every kernel runs
// on the context's stream, takes any storage dtype (fp32, fp16, bf16) and computes in fp32;
// the contiguous ones move 16 bytes per thread per access.
// Thread-safety: reentrant (per context).

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

// dst[i] = src[i] converted (n elements).
absl::Status Cast(GpuContext* ctx, const void* src, DType src_type, void* dst, DType dst_type,
                  int64_t n);
// x[i] *= alpha (fp32).
absl::Status Scale(GpuContext* ctx, float* x, int64_t n, float alpha);
// A weight regularizer (fp32): *penalty = l1 sum |w| + l2 sum w^2 (one block, a fixed order),
// and, when `grad` is not null, grad += grad_scale (l1 sign(w) + 2 l2 w).
absl::Status WeightPenalty(GpuContext* ctx, const float* w, int64_t n, float l1, float l2,
                           float* grad, float grad_scale, float* penalty);
// The same over a layer's output y in any dtype (an activity regularizer), its gradient added
// to dy (y's shape and dtype) when dy is given.
absl::Status ActivityPenalty(GpuContext* ctx, const DeviceTensor& y, float l1, float l2,
                             DeviceTensor* dy, float grad_scale, float* penalty);
// acc[i] += x[i] over tensors of one size and dtype (a gradient's contributions summed).
absl::Status AddInto(GpuContext* ctx, DeviceTensor* acc, const DeviceTensor& x);
// y[(o * channels + c) * inner + i] += b[c] for o < outer: the bias of a Dense layer
// (inner 1) or a convolution (inner H*W). y in any dtype, b fp32.
absl::Status AddBias(GpuContext* ctx, DeviceTensor* y, const float* b, int64_t outer,
                     int64_t channels, int64_t inner);
// db[c] = sum over o, i of dy[(o * channels + c) * inner + i], in fp32.
absl::Status BiasGrad(GpuContext* ctx, const DeviceTensor& dy, float* db, int64_t outer,
                      int64_t channels, int64_t inner);
// True when every one of the n fp32 values is finite (one reduction, one 4-byte read back).
absl::StatusOr<bool> AllFinite(GpuContext* ctx, const float* x, int64_t n);

}  // namespace lockstep::trainer::cuda
