#include "trainer/kernels/cuda/gpu_available.h"

#ifdef LOCKSTEP_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace lockstep::trainer::cuda {

#ifdef LOCKSTEP_HAVE_CUDA
bool BuiltWithCuda() { return true; }

GpuCountResult GpuCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error for later calls
    return {0, std::string("no usable GPU: ") + cudaGetErrorString(e)};
  }
  if (n == 0) return {0, "no GPU is visible"};
  return {n, ""};
}
#else
bool BuiltWithCuda() { return false; }
GpuCountResult GpuCount() { return {0, "this build has no CUDA support"}; }
#endif

}  // namespace lockstep::trainer::cuda
