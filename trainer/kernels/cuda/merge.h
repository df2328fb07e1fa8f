#pragma once
// The graph's merge, concatenation and embedding layers on the GPU, with the CPU layers'
// semantics (trainer/layers/merging/, trainer/layers/rnn/rnn.h):
//   MergeForward/Backward   Add, Subtract, Multiply, Average, Maximum, Minimum of up to
//                           kMaxMergeInputs inputs of one rank, size-1 axes broadcast (as
//                           Keras does; squeeze-and-excitation). y = x0, then y op= xk in
//                           order, as the CPU does; a broadcast input's gradient sums over its
//                           broadcast axes (gathered per element, no atomics); Maximum and
//                           Minimum send the gradient to the first input holding the extreme.
//   ConcatForward/Backward  along one axis (the batch is axis 0).
//   EmbeddingForward/Backward  rows of a [vocabulary, dim] table by id (fp32 ids, as the data
//                           arrive); an id outside the table gives a zero row and is counted in
//                           `bad` (a device int the caller reads when it checks the step). The
//                           table's gradient is summed per id in row order (ids sorted with a
//                           stable radix sort), so a run repeats bit for bit.
// Any storage dtype for activations (one per call), fp32 arithmetic; the embedding table's
// gradient is fp32.
// Thread-safety: reentrant per context.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/kernels/types.h"

namespace lockstep::trainer::cuda {

inline constexpr int kMaxMergeInputs = 8;
inline constexpr int kMaxMergeRank = 6;

absl::Status MergeForward(GpuContext* ctx, MergeOp op, const std::vector<const DeviceTensor*>& x,
                          DeviceTensor* y);
// dx[k] (null where that input needs no gradient) from the inputs, y and dy.
absl::Status MergeBackward(GpuContext* ctx, MergeOp op, const std::vector<const DeviceTensor*>& x,
                           const DeviceTensor& y, const DeviceTensor& dy,
                           const std::vector<DeviceTensor*>& dx);

absl::Status ConcatForward(GpuContext* ctx, const std::vector<const DeviceTensor*>& x, int axis,
                           DeviceTensor* y);
absl::Status ConcatBackward(GpuContext* ctx, const DeviceTensor& dy,
                            const std::vector<const DeviceTensor*>& x, int axis,
                            const std::vector<DeviceTensor*>& dx);

// ids [...], table [vocabulary, dim] (compute dtype) -> y [..., dim] in the table's dtype.
absl::Status EmbeddingForward(GpuContext* ctx, const DeviceTensor& ids, const DeviceTensor& table,
                              DeviceTensor* y, int* bad);
// dtable [vocabulary, dim] fp32 += the rows of dy per id.
absl::Status EmbeddingBackward(GpuContext* ctx, const DeviceTensor& ids, const DeviceTensor& dy,
                               int64_t vocabulary, float* dtable);

}  // namespace lockstep::trainer::cuda
