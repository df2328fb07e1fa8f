#pragma once
// 2-D convolution, NCHW, stride 1 with symmetric zero padding, through im2col and GEMM:
// x [N, C, H, W], w [K, C, R, S], b [K] -> y [N, K, H+2p-R+1, W+2p-S+1]. The CUDA
// counterpart (cuDNN) takes the same arguments.
// Thread-safety: reentrant; `scratch` is the caller's (one per layer).

#include <cstdint>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {

struct Conv2dParams {
  int64_t pad = 0;
};

Shape Conv2dOutputShape(const Shape& x, const Shape& w, const Conv2dParams& p);

void Conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                   Tensor* y, std::vector<float>* scratch);
// dx may be null (the first layer needs no input gradient).
void Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv2dParams& p,
                    Tensor* dx, Tensor* dw, Tensor* db, std::vector<float>* scratch);

}  // namespace lockstep::trainer::cpu
