#include "trainer/kernels/cpu/relu.h"

#include <algorithm>

namespace lockstep::trainer::cpu {

void ReluForward(const Tensor& x, Tensor* y) {
  y->Resize(x.shape());
  const float* __restrict px = x.data();
  float* __restrict py = y->data();
  for (int64_t i = 0, n = x.size(); i < n; ++i) py[i] = std::max(px[i], 0.0f);
}

void ReluBackward(const Tensor& x, const Tensor& dy, Tensor* dx) {
  dx->Resize(x.shape());
  const float* __restrict px = x.data();
  const float* __restrict pdy = dy.data();
  float* __restrict pdx = dx->data();
  // Both operands are read unconditionally, so the select vectorises.
  for (int64_t i = 0, n = x.size(); i < n; ++i) {
    const float g = pdy[i];
    pdx[i] = px[i] > 0.0f ? g : 0.0f;
  }
}

}  // namespace lockstep::trainer::cpu
