#pragma once
// Convolution on the CPU through oneDNN (Debian's libdnnl), on channels-last data and Keras's
// kernel layouts, so the graph's tensors are passed as they are, without reorders:
//   input [n, spatial..., c_in], output [n, spatial'..., c_out];
//   kernel [k..., c_in, c_out] (groups == 1), or a depthwise kernel [k..., c_in, multiplier]
//   (groups == c_in, c_out == c_in * multiplier; output channel c * multiplier + m).
// One object holds the primitives of one geometry (batch size included); the layer keeps one per
// shape it is called with. The CUDA counterpart (cuDNN) takes the same geometry.
// Thread-safety: one thread per object. oneDNN runs on OpenMP threads, as many as threads.h
// allows.

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/kernels/cpu/conv_geometry.h"

namespace lockstep::trainer::cpu {

class DnnlConv {
 public:
  static absl::StatusOr<std::unique_ptr<DnnlConv>> Make(const ConvGeometry& g, bool bias);
  ~DnnlConv();
  DnnlConv(const DnnlConv&) = delete;
  DnnlConv& operator=(const DnnlConv&) = delete;

  // y = conv(x, w) (+ b when made with a bias).
  void Forward(const float* x, const float* w, const float* b, float* y);
  // dx = the gradient of the input (overwritten).
  void BackwardData(const float* dy, const float* w, float* dx);
  // dw (and db when made with a bias) overwritten with the gradients of the weights.
  void BackwardWeights(const float* x, const float* dy, float* dw, float* db);

 private:
  struct Impl;
  explicit DnnlConv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::trainer::cpu
