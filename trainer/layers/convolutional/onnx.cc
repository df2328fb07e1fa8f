// The ONNX exporters of the convolutional family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::convolutional {
namespace {

using graph::Layer;
using graph::OptionsOf;
using graph::Padding;
using Names = absl::StatusOr<std::vector<std::string>>;

absl::StatusOr<std::string> Conv(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
                                 const std::string& x, const std::vector<int>& in_t,
                                 const graph::ConvOptions& o) {
  absl::StatusOr<std::vector<OnnxAttr>> attrs = ox.WindowAttrs(
      ox.ShapeOf(in_t[0]), o.rank, o.kernel_size, o.strides, o.dilation_rate, o.padding, true);
  if (!attrs.ok()) return attrs.status();
  std::vector<std::string> ins{
      ox.ToChannelsFirst(x, o.rank),
      ox.Const("kernel", OnnxBuilder::ConvKernel(*w.Get("kernel"), o.rank))};
  if (o.use_bias) ins.push_back(ox.Const("bias", *w.Get("bias")));
  return ox.Act(l, ox.ToChannelsLast(ox.Op("Conv", ins, *attrs), o.rank), o.activation);
}

// Keras's depthwise kernel [k..., c, m] as a grouped convolution's [c * m, 1, k...].
Tensor DepthwiseKernel(const Tensor& k, int rank) {
  std::vector<size_t> perm{static_cast<size_t>(rank), static_cast<size_t>(rank + 1)};
  for (int i = 0; i < rank; ++i) perm.push_back(static_cast<size_t>(i));
  Tensor p = Permute(k, perm);  // [c, m, k...]
  Shape s{p.dim(0) * p.dim(1), 1};
  for (int i = 0; i < rank; ++i) s.push_back(p.dim(static_cast<size_t>(i + 2)));
  return Tensor(s, p.values());
}

absl::StatusOr<std::string> DepthwiseOp(OnnxBuilder& ox, const OnnxWeights& w,
                                        const std::string& xcf, const std::vector<int>& in_t,
                                        int rank, const std::vector<int64_t>& kernel,
                                        const std::vector<int64_t>& strides,
                                        const std::vector<int64_t>& dilation, Padding padding,
                                        const char* weight, const Tensor* bias) {
  absl::StatusOr<std::vector<OnnxAttr>> attrs =
      ox.WindowAttrs(ox.ShapeOf(in_t[0]), rank, kernel, strides, dilation, padding, true);
  if (!attrs.ok()) return attrs.status();
  const int64_t channels = ox.ShapeOf(in_t[0]).back();
  attrs->push_back({"group", channels});
  std::vector<std::string> ins{xcf, ox.Const("depthwise", DepthwiseKernel(*w.Get(weight), rank))};
  if (bias != nullptr) ins.push_back(ox.Const("bias", *bias));
  return ox.Op("Conv", ins, *attrs);
}

absl::StatusOr<std::string> Depthwise(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
                                      const std::string& x, const std::vector<int>& in_t,
                                      const graph::DepthwiseOptions& o) {
  const char* name = w.Get("depthwise_kernel") != nullptr ? "depthwise_kernel" : "kernel";
  absl::StatusOr<std::string> y =
      DepthwiseOp(ox, w, ox.ToChannelsFirst(x, o.rank), in_t, o.rank, o.kernel_size, o.strides,
                  o.dilation_rate, o.padding, name, o.use_bias ? w.Get("bias") : nullptr);
  if (!y.ok()) return y;
  return ox.Act(l, ox.ToChannelsLast(*y, o.rank), o.activation);
}

absl::StatusOr<std::string> Separable(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
                                      const std::string& x, const std::vector<int>& in_t,
                                      const graph::SeparableOptions& o) {
  absl::StatusOr<std::string> d =
      DepthwiseOp(ox, w, ox.ToChannelsFirst(x, o.rank), in_t, o.rank, o.kernel_size, o.strides,
                  o.dilation_rate, o.padding, "depthwise_kernel", nullptr);
  if (!d.ok()) return d;
  std::vector<std::string> ins{
      *d, ox.Const("pointwise", OnnxBuilder::ConvKernel(*w.Get("pointwise_kernel"), o.rank))};
  if (o.use_bias) ins.push_back(ox.Const("bias", *w.Get("bias")));
  return ox.Act(l, ox.ToChannelsLast(ox.Op("Conv", ins), o.rank), o.activation);
}

absl::StatusOr<std::string> ConvTranspose(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
                                          const std::string& x, const std::vector<int>& in_t,
                                          const graph::ConvTransposeOptions& o) {
  const Shape& in = ox.ShapeOf(in_t[0]);
  std::vector<int64_t> before, after, extra;
  for (int i = 0; i < o.rank; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t len = in[u], k = o.kernel_size[u], s = o.strides[u];
    if (len < 0) return OnnxRefusal(l, "an input of open length");
    // The lengths and padding the engine uses.
    const graph::AxisGeometry geo = graph::TransposeAxis(
        len, k, s, o.padding,
        o.output_padding ? std::optional<int64_t>((*o.output_padding)[u]) : std::nullopt);
    const int64_t out = geo.out, b = geo.pad_before;
    const int64_t full = (len - 1) * s + k;
    const int64_t cut = full - b - out;  // what ONNX must remove after (or add, if < 0)
    before.push_back(b);
    after.push_back(std::max<int64_t>(cut, 0));
    extra.push_back(std::max<int64_t>(-cut, 0));
  }
  std::vector<int64_t> pads = before;
  pads.insert(pads.end(), after.begin(), after.end());
  std::vector<OnnxAttr> attrs{{"kernel_shape", o.kernel_size},
                              {"strides", o.strides},
                              {"pads", pads},
                              {"output_padding", extra}};
  // Keras's [k..., out, in] is ONNX's [in, out, k...]: the same permutation as a convolution's.
  std::vector<std::string> ins{
      ox.ToChannelsFirst(x, o.rank),
      ox.Const("kernel", OnnxBuilder::ConvKernel(*w.Get("kernel"), o.rank))};
  if (o.use_bias) ins.push_back(ox.Const("bias", *w.Get("bias")));
  return ox.Act(l, ox.ToChannelsLast(ox.Op("ConvTranspose", ins, attrs), o.rank), o.activation);
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::ConvOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(
        Conv(ox, a.layer, a.weights, a.in[0], a.in_t, *OptionsOf<graph::ConvOptions>(a.layer)));
  });
  r.Onnx<graph::DepthwiseOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(Depthwise(ox, a.layer, a.weights, a.in[0], a.in_t,
                               *OptionsOf<graph::DepthwiseOptions>(a.layer)));
  });
  r.Onnx<graph::SeparableOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(Separable(ox, a.layer, a.weights, a.in[0], a.in_t,
                               *OptionsOf<graph::SeparableOptions>(a.layer)));
  });
  r.Onnx<graph::ConvTransposeOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(ConvTranspose(ox, a.layer, a.weights, a.in[0], a.in_t,
                                   *OptionsOf<graph::ConvTransposeOptions>(a.layer)));
  });
}

}  // namespace lockstep::trainer::layers::convolutional
