#include "trainer/kernels/cuda/gpu_available.h"

#ifdef LOCKSTEP_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdio>
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

std::string GpuLibraryVersions() {
  // CUDA's versions count major * 1000 + minor * 10; cuDNN 9's and NCCL's (from 2.9) count
  // major * 10000 + minor * 100 + patch.
  auto cuda = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  auto three = [](long v) {
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
           std::to_string(v % 100);
  };
  int runtime = 0, driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  (void)cudaGetLastError();
  int blas[3] = {0, 0, 0};
  (void)cublasGetProperty(MAJOR_VERSION, &blas[0]);
  (void)cublasGetProperty(MINOR_VERSION, &blas[1]);
  (void)cublasGetProperty(PATCH_LEVEL, &blas[2]);
  int nccl = 0;
  (void)ncclGetVersion(&nccl);
  return "CUDA runtime " + cuda(runtime) + ", driver " + (driver > 0 ? cuda(driver) : "none") +
         ", cuBLAS " + std::to_string(blas[0]) + "." + std::to_string(blas[1]) + "." +
         std::to_string(blas[2]) + ", cuDNN " + three(static_cast<long>(cudnnGetVersion())) +
         ", NCCL " + three(nccl);
}

std::string GpuUuid(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  const auto* b = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}
#else
bool BuiltWithCuda() { return false; }
GpuCountResult GpuCount() { return {0, "this build has no CUDA support"}; }
std::string GpuLibraryVersions() { return "this build has no CUDA support"; }
std::string GpuUuid(int) { return ""; }
#endif

}  // namespace lockstep::trainer::cuda
