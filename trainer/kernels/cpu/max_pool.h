#pragma once
// 2-D max pooling, NCHW, window and stride `size` (2 for the cnn model), no padding; a
// trailing row or column that does not fill a window is dropped (Keras' "valid"). The forward
// pass records each output's arg-max so the backward pass routes the gradient to it.
// Thread-safety: reentrant.

#include <cstdint>
#include <vector>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {

void MaxPoolForward(const Tensor& x, int64_t size, Tensor* y, std::vector<int32_t>* argmax);
void MaxPoolBackward(const Tensor& dy, const std::vector<int32_t>& argmax, const Shape& x_shape,
                     Tensor* dx);

}  // namespace lockstep::trainer::cpu
