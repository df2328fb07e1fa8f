#pragma once
// The convolution layers, channels-last as Keras's default data_format: Conv1D/2D/3D,
// Conv1D/2D/3DTranspose, DepthwiseConv1D/2D and SeparableConv1D/2D. Kernels keep Keras's
// layouts (Conv [k..., in, filters]; transpose [k..., filters, in]; depthwise [k..., in,
// multiplier]; separable's pointwise [1..., in * multiplier, filters]) so Keras weights load
// one to one.
//
// Padding is Keras's (TensorFlow's): "same" gives ceil(in / stride) outputs and pads
// total = max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0), of which total / 2 before
// and the rest (one more when odd) after; "causal" (Conv1D) pads (k - 1) * dilation before
// only. Convolutions (and depthwise convolutions) run through oneDNN (cpu::DnnlConv, which takes
// these layouts as they are); the fallback is im2col (patches in (k..., in) order, which is the
// kernel's flattening) and one GEMM per chunk of examples whose patch matrix stays under 4 MiB
// (1x1 stride-1 kernels skip im2col), and direct depthwise loops, channels innermost. The
// transposed convolutions always run im2col.
// Thread-safety: one thread per layer object (layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/activation.h"
#include "trainer/graph/initializer.h"
#include "trainer/graph/layer.h"
#include "trainer/kernels/cpu/conv_geometry.h"

namespace lockstep::trainer::graph {

enum class Padding { kValid, kSame, kCausal };

// How Conv, DepthwiseConv and SeparableConv's depthwise part compute: through oneDNN (the
// default), or through the loops below (im2col + GEMM, direct depthwise loops), which also run
// where oneDNN has no implementation for a geometry. Process-wide; tests and benchmarks compare
// the two.
enum class ConvBackend { kOneDnn, kLoops };
void SetConvBackend(ConvBackend b);
ConvBackend GetConvBackend();
// How many call geometries oneDNN has refused in this process (each then runs the loops, with
// a warning naming the layer and its input).
int64_t OneDnnRefusals();

// The spatial axes the convolution and pooling layers handle (1D, 2D and 3D).
inline constexpr int kSpatialAxes = 3;

// One spatial axis of a windowed operation: the output length and the padding before the first
// input. `out` <= 0 when a valid window does not fit. in < 0 (unknown) gives out = -1.
struct AxisGeometry {
  int64_t out = 0;
  int64_t pad_before = 0;
};
AxisGeometry WindowAxis(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, Padding p);
// A transposed convolution's output length along one axis (-1 for an open `in`) and the
// padding cut before its first output: Keras's deconv_output_length (dilation 1; same: in *
// stride, valid: in * stride + max(k - stride, 0), or from `output_padding` when given) and
// TensorFlow's split of the padding (same: max((in - 1) * s + k - out, 0), half before).
AxisGeometry TransposeAxis(int64_t in, int64_t kernel, int64_t stride, Padding p,
                           std::optional<int64_t> output_padding);

struct ConvOptions {
  int rank = 2;  // 1, 2 or 3 spatial axes
  int64_t filters = 1;
  std::vector<int64_t> kernel_size{3, 3}, strides{1, 1}, dilation_rate{1, 1};
  Padding padding = Padding::kValid;  // kCausal for rank 1 only
  Activation activation;
  bool use_bias = true;
  Initializer kernel_initializer = GlorotUniform();
  Initializer bias_initializer = Zeros();
  float kernel_l1 = 0, kernel_l2 = 0, bias_l1 = 0, bias_l2 = 0;
};
// Conv1D/2D/3D: y = act(conv(x, kernel) + bias); "kernel" [k..., in, filters], "bias".
std::unique_ptr<Layer> MakeConv(std::string name, ConvOptions o);

struct ConvTransposeOptions {
  int rank = 2;
  int64_t filters = 1;
  std::vector<int64_t> kernel_size{3, 3}, strides{1, 1};
  Padding padding = Padding::kValid;  // valid or same
  // Extra outputs at the end of each axis (Keras's output_padding; each < its stride); absent:
  // Keras's default lengths (same: in * stride; valid: in * stride + max(k - stride, 0)).
  std::optional<std::vector<int64_t>> output_padding;
  Activation activation;
  bool use_bias = true;
  Initializer kernel_initializer = GlorotUniform();
  Initializer bias_initializer = Zeros();
  float kernel_l1 = 0, kernel_l2 = 0, bias_l1 = 0, bias_l2 = 0;
};
// Conv1D/2D/3DTranspose, the gradient of a convolution with respect to its input (dilation 1):
// "kernel" [k..., filters, in], "bias" [filters].
std::unique_ptr<Layer> MakeConvTranspose(std::string name, ConvTransposeOptions o);

struct DepthwiseOptions {
  int rank = 2;
  std::vector<int64_t> kernel_size{3, 3}, strides{1, 1}, dilation_rate{1, 1};
  Padding padding = Padding::kValid;
  int64_t depth_multiplier = 1;
  Activation activation;
  bool use_bias = true;
  Initializer depthwise_initializer = GlorotUniform();
  Initializer bias_initializer = Zeros();
  float depthwise_l1 = 0, depthwise_l2 = 0, bias_l1 = 0, bias_l2 = 0;
};
// DepthwiseConv1D/2D: each input channel c convolved with its own depth_multiplier filters;
// output channel c * multiplier + m. "depthwise_kernel" [k..., in, multiplier], "bias"
// [in * multiplier].
std::unique_ptr<Layer> MakeDepthwiseConv(std::string name, DepthwiseOptions o);

struct SeparableOptions {
  int rank = 2;
  int64_t filters = 1;
  std::vector<int64_t> kernel_size{3, 3}, strides{1, 1}, dilation_rate{1, 1};
  Padding padding = Padding::kValid;
  int64_t depth_multiplier = 1;
  Activation activation;
  bool use_bias = true;
  Initializer depthwise_initializer = GlorotUniform();
  Initializer pointwise_initializer = GlorotUniform();
  Initializer bias_initializer = Zeros();
  float depthwise_l1 = 0, depthwise_l2 = 0, pointwise_l1 = 0, pointwise_l2 = 0, bias_l1 = 0,
        bias_l2 = 0;
};
// SeparableConv1D/2D: a depthwise convolution (no bias) then a 1x1 convolution to `filters`:
// "depthwise_kernel" [k..., in, multiplier], "pointwise_kernel" [1..., in * multiplier,
// filters], "bias" [filters].
std::unique_ptr<Layer> MakeSeparableConv(std::string name, SeparableOptions o);

// The geometry of one call of a windowed layer on an input of batch-first shape `x`, as the
// CPU layer computes it (what the GPU engine makes its cuDNN plans and pooling kernels from):
// Conv and DepthwiseConv as they are; SeparableConv's depthwise part; ConvTranspose the
// convolution it is the input gradient of (c_in = filters, its input this layer's output).
// InvalidArgument for any other layer (a pooling's is PoolGeometry, pooling/pooling.h).
absl::StatusOr<cpu::ConvGeometry> CallGeometry(const Layer& l, const Shape& x);

}  // namespace lockstep::trainer::graph
