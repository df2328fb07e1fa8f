#pragma once
// The graph's normalization layers on the GPU, with the CPU layers' semantics
// (trainer/layers/normalization/normalization.h), on channels-last data flattened to rows:
//
// Without masks: the CPU BatchNormalization excludes masked steps from its statistics, so a
// masked call stays on the CPU path until these take a mask.
// BatchNormalization over [rows, c]: in training the batch's mean and biased variance
// normalise (the moving statistics follow Keras's update with the same biased variance), in
// inference the moving statistics. Per-channel sums are deterministic: fixed chunks of rows
// reduced in a fixed order (no atomics), so a run repeats bit for bit.
// LayerNormalization over [rows, group]: each row normalised over its `group` values; gamma
// and beta have `group` values.
//
// x, y, dy, dx share a storage dtype (any); statistics, gamma, beta and their gradients are
// fp32 device arrays. Gradients of gamma and beta are added to (a shared layer sums its
// calls'); either may be null, as may gamma and beta (scale/center off) and dx.
// Thread-safety: reentrant per context.

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

struct BatchNormParams {
  int64_t channels = 0;
  float epsilon = 1e-3f;
  float momentum = 0.99f;
  // Batch statistics (training) or the moving ones (inference, or a frozen layer).
  bool batch_statistics = true;
};

// y = gamma (x - mean) rstd + beta. `mean` and `rstd` ([c]) receive the statistics used, for
// the backward pass; with batch statistics the moving ones ([c]) are updated.
absl::Status BatchNormForward(GpuContext* ctx, const DeviceTensor& x, const float* gamma,
                              const float* beta, const BatchNormParams& p, float* moving_mean,
                              float* moving_variance, float* mean, float* rstd, DeviceTensor* y);
absl::Status BatchNormBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& dy,
                               const float* gamma, const float* mean, const float* rstd,
                               const BatchNormParams& p, float* dgamma, float* dbeta,
                               DeviceTensor* dx);

// `mean` and `rstd` have one value per row.
absl::Status LayerNormForward(GpuContext* ctx, const DeviceTensor& x, int64_t group,
                              const float* gamma, const float* beta, float epsilon, float* mean,
                              float* rstd, DeviceTensor* y);
absl::Status LayerNormBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& dy,
                               int64_t group, const float* gamma, const float* mean,
                               const float* rstd, float* dgamma, float* dbeta, DeviceTensor* dx);

}  // namespace lockstep::trainer::cuda
