#pragma once
// Whether this build has the GPU path, and how many GPUs this process can see. Compiled in
// every build: without CUDA, GpuCount() is 0 and says why, so callers (the trainer's --device
// flag, the gpu-labelled tests) need no #ifdefs.
// Thread-safety: thread-safe.

#include <string>

namespace lockstep::trainer::cuda {

// True when the trainer was built with CUDA.
bool BuiltWithCuda();

struct GpuCountResult {
  int count = 0;
  std::string why_none;  // when count is 0: "no CUDA driver", "built without CUDA", ...
};
// The visible GPUs (CUDA_VISIBLE_DEVICES applies). Never fails: a machine without a driver or
// device has 0.
GpuCountResult GpuCount();

}  // namespace lockstep::trainer::cuda
