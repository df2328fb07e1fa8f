#include "trainer/kernels/cpu/relu.h"

namespace lockstep::trainer::cpu {

void ReluForward(const Tensor& x, Tensor* y) {
  y->Resize(x.shape());
  const float* px = x.data();
  float* py = y->data();
  for (int64_t i = 0, n = x.size(); i < n; ++i) py[i] = px[i] > 0.0f ? px[i] : 0.0f;
}

void ReluBackward(const Tensor& x, const Tensor& dy, Tensor* dx) {
  dx->Resize(x.shape());
  const float* px = x.data();
  const float* pdy = dy.data();
  float* pdx = dx->data();
  for (int64_t i = 0, n = x.size(); i < n; ++i) pdx[i] = px[i] > 0.0f ? pdy[i] : 0.0f;
}

}  // namespace lockstep::trainer::cpu
