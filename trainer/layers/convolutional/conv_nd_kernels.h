#pragma once
// The graph's convolutions on the GPU through cuDNN: the counterpart of cpu::DnnlConv
// (kernels/cpu/dnnl_conv.h), made from the same geometry, on the same channels-last tensors and
// Keras kernel layouts:
//   input [n, spatial..., c_in], output [n, spatial'..., c_out];
//   kernel [k..., c_in, c_out], or a depthwise kernel [k..., c_in, multiplier] (grouped, one
//   group per input channel; output channel c * multiplier + m).
// cuDNN wants the kernel as [c_out, k..., c_in / groups]: the Keras kernel is permuted into
// that layout each call (and the kernel gradient back), which costs one pass over the weights.
// cuDNN pads symmetrically; Keras's odd "same" padding (one more at the end) and "causal"
// padding are done by copying the input into a zero-padded buffer first (and the input
// gradient cropped from the padded one). 1D runs as 2D with a height of 1. The fastest
// algorithm per direction is measured once (cudnnFind*). Arithmetic is fp32 for every storage
// dtype; TF32 where the context allows it. Known limits: cuDNN writes the kernel gradient in the
// storage dtype before it is widened to fp32 (under fp16 loss scaling a large sum overflows and
// the scaler lowers the scale; Dense's gradient is fp32 throughout), and the fastest algorithm
// may accumulate with atomics, so convolutions need not repeat bit for bit.
// Thread-safety: one thread per object (the context's).

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "trainer/kernels/cpu/conv_geometry.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

class CudnnConv {
 public:
  // `dtype` is the storage dtype of x, w (the compute copy) and y.
  static absl::StatusOr<std::unique_ptr<CudnnConv>> Make(GpuContext* ctx,
                                                         const cpu::ConvGeometry& g, DType dtype,
                                                         bool bias);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // y = conv(x, w) (+ b, fp32, when made with a bias).
  absl::Status Forward(const DeviceTensor& x, const DeviceTensor& w, const float* b,
                       DeviceTensor* y);
  // dx overwritten with the input gradient.
  absl::Status BackwardData(const DeviceTensor& dy, const DeviceTensor& w, DeviceTensor* dx);
  // dw (fp32, Keras layout) and db (fp32, when made with a bias) overwritten.
  absl::Status BackwardWeights(const DeviceTensor& x, const DeviceTensor& dy, float* dw, float* db);

 private:
  struct Plan;
  explicit CudnnConv(std::unique_ptr<Plan> plan);
  std::unique_ptr<Plan> plan_;
};

// Conv1D/2D/3DTranspose, the gradient of a convolution with respect to its input, through the
// same plans: forward is that convolution's BackwardData, the input gradient its Forward, the
// kernel gradient its BackwardWeights with the roles of input and gradient swapped. `g` is the
// convolution's geometry as the CPU layer derives it (its input is this layer's output, its
// output this layer's input; c_in = filters, c_out = this layer's input channels), and the
// Keras kernel [k..., filters, in] is that convolution's kernel as it is. A geometry whose
// output_padding leaves the convolution more windows than the input has positions is refused
// at Make (cuDNN's window count must equal the geometry's).
class CudnnConvTranspose {
 public:
  static absl::StatusOr<std::unique_ptr<CudnnConvTranspose>> Make(GpuContext* ctx,
                                                                  const cpu::ConvGeometry& g,
                                                                  DType dtype, bool bias);
  // y [n, out..., filters] from x [n, in..., c] (+ b).
  absl::Status Forward(const DeviceTensor& x, const DeviceTensor& w, const float* b,
                       DeviceTensor* y);
  absl::Status BackwardData(const DeviceTensor& dy, const DeviceTensor& w, DeviceTensor* dx);
  // dw (fp32, Keras layout) and db overwritten.
  absl::Status BackwardWeights(const DeviceTensor& x, const DeviceTensor& dy, float* dw, float* db);

 private:
  CudnnConvTranspose(std::unique_ptr<CudnnConv> conv, GpuContext* ctx, int64_t filters, bool bias)
      : conv_(std::move(conv)), ctx_(ctx), filters_(filters), bias_(bias) {}
  std::unique_ptr<CudnnConv> conv_;
  GpuContext* ctx_;
  int64_t filters_;
  bool bias_;
};

}  // namespace lockstep::trainer::cuda
