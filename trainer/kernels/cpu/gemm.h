#pragma once
// GEMM on the CPU through OpenBLAS: C = alpha * op(A) * op(B) + beta * C, row-major, where
// op(X) is X or its transpose. A is [M, K] (or [K, M] transposed), B is [K, N] (or [N, K]),
// C is [M, N]. The CUDA counterpart (cuBLAS) takes the same arguments.
// Thread-safety: reentrant; OpenBLAS uses its own threads (threads.h).

#include <cstdint>

namespace lockstep::trainer::cpu {

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, const float* b, float beta, float* c);

}  // namespace lockstep::trainer::cpu
