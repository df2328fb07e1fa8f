#pragma once
// Matrix products through cuBLAS (cublasGemmEx: fp32, TF32, or fp16/bf16 inputs with fp32
// sums), as cpu::Gemm computes them. Each returns a Status: a library error names the call.
// Work is queued on the context's stream and not waited for.
// Thread-safety: reentrant per context.

#include <cstdint>

#include "absl/status/statusor.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

// C = alpha * op(A) * op(B) + beta * C, row-major, as cpu::Gemm. A and B share a dtype; C is
// that dtype or fp32. fp32 inputs use TF32 tensor cores when the context allows.
absl::Status Gemm(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const void* a, const void* b, DType ab_type, float beta,
                  void* c, DType c_type);
// The fp32 form, argument for argument cpu::Gemm's.
absl::Status Gemm(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float* a, const float* b, float beta, float* c);

// `batch` fp32 products C_i = alpha op(A_i) op(B_i) + beta C_i, the i-th matrices
// stride_a, stride_b and stride_c elements after the (i-1)-th (attention's per-head products).
absl::Status GemmBatched(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float* a, int64_t stride_a, const float* b,
                         int64_t stride_b, float beta, float* c, int64_t stride_c, int64_t batch);

}  // namespace lockstep::trainer::cuda
