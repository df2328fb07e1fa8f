#pragma once
// How far apart two computations of the same float32 sums may be when they add in different
// orders: oneDNN against the loops, OpenBLAS's AVX2 kernels against its AVX-512 ones, a batch
// against its examples. A fixed relative error is no bound: the rounding of a sum grows with
// its length K and with the size of its terms, not of its result (a kernel gradient summed over
// 8,192 positions can end near zero). Each computed sum s of K products lies within
// gamma_K * sum_k |a_k b_k| of the exact one (gamma_K = K*u / (1 - K*u), u = 2^-24: the
// deterministic bound), so two orders lie within twice that of each other.
//
// `magnitude[i]` is sum_k |a_k b_k| for element i: for a bilinear op (a convolution, a GEMM,
// their gradients, a bias gradient) it is the op itself run on the absolute values of its
// operands. `k` is the longest sum behind any element.
// Thread-safety: pure.

#include <cstdint>
#include <string>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph::testing {

// The bound for one element: 2 * gamma_K * magnitude.
double SummationBound(int64_t k, double magnitude);

// "" when every |got[i] - want[i]| <= SummationBound(k, magnitude[i]); else the element
// furthest past its bound, with its values, and how many are past theirs. Also reports the
// largest error-to-bound ratio over all elements in *worst_ratio when given (a benchmark of
// the margin: 1 is the bound).
std::string SummationMismatch(const Tensor& got, const Tensor& want, const Tensor& magnitude,
                              int64_t k, double* worst_ratio = nullptr);

}  // namespace lockstep::trainer::graph::testing
