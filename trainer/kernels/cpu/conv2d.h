#pragma once
// 2-D convolution, NCHW, stride 1 with symmetric zero padding, through im2col and GEMM:
// x [N, C, H, W], w [K, C, R, S], b [K] -> y [N, K, H+2p-R+1, W+2p-S+1]. The whole batch is
// unrolled into one column matrix [C*R*S, N*OH*OW], so each pass is one large GEMM rather than
// N small ones (which keeps BLAS threads busy instead of waking them N times). The CUDA
// counterpart (cuDNN) takes the same arguments.
// Thread-safety: reentrant; the workspace is the caller's (one per layer).

#include <cstdint>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {

struct Conv2dParams {
  int64_t pad = 0;
};

Shape Conv2dOutputShape(const Shape& x, const Shape& w, const Conv2dParams& p);

// Buffers reused across steps. Forward leaves the input's columns in `col`, which Backward
// reads, so Backward must follow the Forward of the same input with the same workspace.
struct Conv2dWorkspace {
  std::vector<float> col;  // [C*R*S, N*OH*OW]
  std::vector<float> out;  // [K, N*OH*OW]: the GEMM's output or dY gathered
  std::vector<float> dcol;
};

void Conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                   Tensor* y, Conv2dWorkspace* ws);
// dx may be null (the first layer needs no input gradient).
void Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv2dParams& p,
                    Tensor* dx, Tensor* dw, Tensor* db, Conv2dWorkspace* ws);

}  // namespace lockstep::trainer::cpu
