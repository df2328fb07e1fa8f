#pragma once
// Dense (fully connected) forward and backward: y = x W^T + b, with x [N, IN], W [OUT, IN]
// (the layout cuBLAS and PyTorch use), b [OUT], y [N, OUT].
// Thread-safety: reentrant.

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {

void DenseForward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y);
// From dy: dx = dy W, dW = dy^T x, db = column sums of dy. dx may be null (the first layer).
void DenseBackward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                   Tensor* db);

}  // namespace lockstep::trainer::cpu
