#pragma once
// The Keras losses of graph models on the GPU: the counterparts of graph::ComputeLoss and
// graph::CountCorrect (trainer/graph/loss.h), with the same semantics (Keras's reductions,
// probability normalisation and clipping, from_logits computed stably, label smoothing), in one
// pass that also counts the predictions judged right. Predictions and their gradient in any
// storage dtype, targets fp32 (class ids for the sparse loss); the sums are reduced on the
// device in a fixed order (a run repeats bit for bit) and come back as three numbers.
// Thread-safety: reentrant per context.

#include <cstdint>

#include "absl/status/statusor.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/kernels/types.h"

namespace lockstep::trainer::cuda {

struct LossResult {
  double loss = 0;      // the mean, as graph::ComputeLoss returns it
  int64_t correct = 0;  // as graph::CountCorrect counts
  int64_t judged = 0;
};

// dpred (may be null) gets dL/dpred times `grad_scale` (the fp16 loss scale; 1 otherwise). A
// class id outside [0, classes) is InvalidArgument
// naming how many rows had one.
absl::StatusOr<LossResult> ComputeLoss(GpuContext* ctx, const Loss& l, const DeviceTensor& pred,
                                       const DeviceTensor& target, DeviceTensor* dpred,
                                       float grad_scale = 1.0f);

}  // namespace lockstep::trainer::cuda
