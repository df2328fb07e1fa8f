#pragma once
// One checking macro for every CUDA runtime, cuBLAS, cuDNN and NCCL call: a failure becomes an
// absl::Status naming the call, the library's own error text and the source line, returned
// from the enclosing function (which returns absl::Status or absl::StatusOr).
//
//   LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(...));
//   LOCKSTEP_GPU_RETURN_IF_ERROR(cublasGemmEx(...));
//
// Out-of-memory errors map to ResourceExhausted, a missing device or driver to
// FailedPrecondition, NCCL's remote and system errors to Unavailable, the rest to Internal.
// Kernel launches are checked with LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError()).
// LOCKSTEP_RETURN_IF_ERROR returns a failed absl::Status of our own calls (the ops, Resize).
// Thread-safety: stateless.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include "absl/status/status.h"

namespace lockstep::trainer::cuda {

absl::Status GpuStatus(cudaError_t e, const char* expr, const char* file, int line);
absl::Status GpuStatus(cublasStatus_t e, const char* expr, const char* file, int line);
absl::Status GpuStatus(cudnnStatus_t e, const char* expr, const char* file, int line);
absl::Status GpuStatus(ncclResult_t e, const char* expr, const char* file, int line);

}  // namespace lockstep::trainer::cuda

#define LOCKSTEP_GPU_STATUS(expr) \
  ::lockstep::trainer::cuda::GpuStatus((expr), #expr, __FILE__, __LINE__)

#define LOCKSTEP_GPU_RETURN_IF_ERROR(expr)                           \
  do {                                                               \
    ::absl::Status lockstep_gpu_status_ = LOCKSTEP_GPU_STATUS(expr); \
    if (!lockstep_gpu_status_.ok()) return lockstep_gpu_status_;     \
  } while (0)

#define LOCKSTEP_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::absl::Status lockstep_status_ = (expr);            \
    if (!lockstep_status_.ok()) return lockstep_status_; \
  } while (0)
