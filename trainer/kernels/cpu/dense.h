#pragma once
// Dense (fully connected) forward and backward: y = x W^T + b, with x [N, IN], W [OUT, IN]
// (the layout cuBLAS and PyTorch use), b [OUT], y [N, OUT].
// Thread-safety: reentrant.

#include <cstdint>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {

void DenseForward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y);
// From dy: dx = dy W, dW = dy^T x, db = column sums of dy. dx may be null (the first layer).
void DenseBackward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                   Tensor* db);
// dst[j] += the sum over r of src[r * n + j]: the bias gradient of a [rows, n] output's dy.
void AddColumnSums(const float* src, int64_t rows, int64_t n, float* dst);

}  // namespace lockstep::trainer::cpu
