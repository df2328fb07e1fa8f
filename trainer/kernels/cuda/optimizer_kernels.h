#pragma once
// The optimizer updates as one fused CUDA kernel over flat fp32 buffers (all of a model's
// parameters in one launch), for every rule the CPU loops implement (kernels/cpu/update.h)
// with the same arithmetic: each thread reads a gradient once, multiplies it by `grad_factor`
// (1 / (loss scale * replicas): the unscaling and the average folded into the update) and, for
// the Keras rules, by its tensor's clipping scale and clips it to the rule's value, updates the
// fp32 master weight and the rule's slots, and for mixed precision writes the 16-bit compute
// copy of the weight in the same pass.
// Keras's clipnorm (per tensor) and global_clipnorm (over every tensor) are computed on the
// device as the CPU optimizer computes them, from the gradients times `grad_factor`, in a fixed
// order (a run repeats bit for bit), without a read back.
// Thread-safety: reentrant per context; a ClipScales belongs to one engine.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/kernels/types.h"

namespace lockstep::trainer::cuda {

struct UpdateArgs {
  float* params = nullptr;  // fp32 master weights
  const float* grads = nullptr;
  int64_t n = 0;
  float grad_factor = 1.0f;
  void* compute_copy = nullptr;  // null, or n elements of `compute_type` to refresh
  DType compute_type = DType::kF32;
};

// The parameter tensors of a flat buffer (each starts at a multiple of kSegmentAlign elements)
// and, after Compute, each one's gradient scale for this step.
class ClipScales {
 public:
  static constexpr int64_t kSegmentAlign = 64;
  // offsets[i] and sizes[i] of parameter i, in elements, in a buffer of `n`.
  static absl::StatusOr<ClipScales> Make(GpuContext* ctx, const std::vector<int64_t>& offsets,
                                         const std::vector<int64_t>& sizes, int64_t n);
  // scale_i = global * min(1, clipnorm / (norm_i * global)) with global = min(1,
  // global_clipnorm / sqrt(sum_i norm_i^2)); a limit of 0 is off.
  absl::Status Compute(GpuContext* ctx, const float* grads, float grad_factor, float clipnorm,
                       float global_clipnorm);

  const int32_t* chunk_segment() const { return chunk_segment_.as<int32_t>(); }
  const float* scales() const { return scales_.as<float>(); }

 private:
  int64_t segments_ = 0;
  DeviceBuffer offsets_, sizes_;   // int64 per parameter
  DeviceBuffer chunk_segment_;     // int32 per kSegmentAlign elements: the parameter there
  DeviceBuffer squares_, scales_;  // fp32 per parameter
};

// Updates a.params with the rule of `u` (u.scale multiplies the gradient; its clip applies to
// the Keras rules) and slots s0..s2 (null where the rule has fewer). `clip` (may be null) gives
// each tensor's scale.
absl::Status ApplyUpdate(GpuContext* ctx, const UpdateParams& u, const UpdateArgs& a, float* s0,
                         float* s1, float* s2, const ClipScales* clip);

}  // namespace lockstep::trainer::cuda
