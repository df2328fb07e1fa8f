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

// The CUDA libraries this process loaded, with their versions as they report them: "CUDA
// runtime 13.0, driver 13.0, cuBLAS 13.0.2, cuDNN 9.13.0, NCCL 2.27.7" (driver "none" without
// one). Needs no GPU; names the missing CUDA support in a build without it.
std::string GpuLibraryVersions();

// The UUID of visible GPU `device`, as nvidia-smi writes it ("GPU-1f2e3d4c-..."): the same
// physical GPU has the same UUID in every process, whatever CUDA_VISIBLE_DEVICES numbers it.
// Empty when it cannot be read (no CUDA in this build, no driver, no such device).
std::string GpuUuid(int device);

}  // namespace lockstep::trainer::cuda
