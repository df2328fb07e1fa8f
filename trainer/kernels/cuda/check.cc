#include "trainer/kernels/cuda/check.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::cuda {
namespace {

std::string Where(const char* expr, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return absl::StrCat(expr, " (", base ? base + 1 : file, ":", line, ")");
}

}  // namespace

absl::Status GpuStatus(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(Where(expr, file, line), ": CUDA error ", cudaGetErrorName(e),
                                 ": ", cudaGetErrorString(e));
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status GpuStatus(cublasStatus_t e, const char* expr, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(Where(expr, file, line), ": cuBLAS error ", cublasGetStatusName(e),
                                 ": ", cublasGetStatusString(e));
  if (e == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_INVALID_VALUE) {
    return absl::InvalidArgumentError(msg);
  }
  return absl::InternalError(msg);
}

absl::Status GpuStatus(cudnnStatus_t e, const char* expr, const char* file, int line) {
  if (e == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(Where(expr, file, line), ": cuDNN error ", cudnnGetErrorString(e));
  if (e == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (e == CUDNN_STATUS_NOT_SUPPORTED || e == CUDNN_STATUS_BAD_PARAM) {
    return absl::InvalidArgumentError(msg);
  }
  return absl::InternalError(msg);
}

absl::Status GpuStatus(ncclResult_t e, const char* expr, const char* file, int line) {
  if (e == ncclSuccess || e == ncclInProgress) return absl::OkStatus();
  std::string msg = absl::StrCat(Where(expr, file, line), ": NCCL error ", ncclGetErrorString(e));
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') absl::StrAppend(&msg, " (", last, ")");
  switch (e) {
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(msg);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace lockstep::trainer::cuda
