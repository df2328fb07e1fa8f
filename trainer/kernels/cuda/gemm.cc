// Gemm through cuBLAS.
#include "trainer/kernels/cuda/gemm.h"
#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda/check.h"

namespace lockstep::trainer::cuda {
namespace {

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

absl::Status CheckInt(int64_t v, const char* what) {
  if (v < 0 || v > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: ", what, " = ", v, " is out of range"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const void* a, const void* b, DType ab_type, float beta,
                  void* c, DType c_type) {
  for (auto [v, what] : {std::pair{m, "m"}, std::pair{n, "n"}, std::pair{k, "k"}}) {
    if (absl::Status s = CheckInt(v, what); !s.ok()) return s;
  }
  if (c_type != ab_type && c_type != DType::kF32) {
    return absl::InvalidArgumentError("Gemm: C must be fp32 or the inputs' dtype");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS computes the
  // transposed product with the operands swapped, and no data moves.
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  const cublasComputeType_t compute =
      (ab_type == DType::kF32 && ctx->tf32()) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cublasGemmEx(
      ctx->cublas(), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, b, CudaType(ab_type), ldb, a, CudaType(ab_type), lda, &beta, c,
      CudaType(c_type), static_cast<int>(n), compute, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status Gemm(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float* a, const float* b, float beta, float* c) {
  return Gemm(ctx, transpose_a, transpose_b, m, n, k, alpha, a, b, DType::kF32, beta, c,
              DType::kF32);
}

absl::Status GemmBatched(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float* a, int64_t stride_a, const float* b,
                         int64_t stride_b, float beta, float* c, int64_t stride_c, int64_t batch) {
  for (auto [v, what] :
       {std::pair{m, "m"}, std::pair{n, "n"}, std::pair{k, "k"}, std::pair{batch, "batch"}}) {
    if (absl::Status s = CheckInt(v, what); !s.ok()) return s;
  }
  if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();
  // As Gemm: the column-major transposed product with the operands swapped.
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  const cublasComputeType_t compute =
      ctx->tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      ctx->cublas(), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, b, CUDA_R_32F, ldb, stride_b, a, CUDA_R_32F, lda, stride_a,
      &beta, c, CUDA_R_32F, static_cast<int>(n), stride_c, static_cast<int>(batch), compute,
      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
