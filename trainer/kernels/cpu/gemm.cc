#include "trainer/kernels/cpu/gemm.h"

#include <cblas.h>

namespace lockstep::trainer::cpu {

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, const float* b, float beta, float* c) {
  const auto mi = static_cast<blasint>(m);
  const auto ni = static_cast<blasint>(n);
  const auto ki = static_cast<blasint>(k);
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, mi, ni, ki, alpha, a, transpose_a ? mi : ki,
              b, transpose_b ? ki : ni, beta, c, ni);
}

}  // namespace lockstep::trainer::cpu
