#pragma once
// ReLU forward and backward (the gradient passes where the input was positive).
// Thread-safety: reentrant.

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {

void ReluForward(const Tensor& x, Tensor* y);
void ReluBackward(const Tensor& x, const Tensor& dy, Tensor* dx);

}  // namespace lockstep::trainer::cpu
