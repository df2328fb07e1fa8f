// The ONNX exporters of the normalization family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::normalization {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

std::string BatchNorm(OnnxBuilder& ox, const OnnxWeights& w, const std::string& x,
                      const graph::BatchNormOptions& o) {
  const Tensor& mean = *w.Get("moving_mean");
  const Tensor& var = *w.Get("moving_variance");
  const Tensor* gamma = o.scale ? w.Get("gamma") : nullptr;
  const Tensor* beta = o.center ? w.Get("beta") : nullptr;
  const auto n = static_cast<size_t>(mean.size());
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    const auto j = static_cast<int64_t>(i);
    a[i] = (gamma ? (*gamma)[j] : 1.0f) / std::sqrt(var[j] + o.epsilon);
    b[i] = (beta ? (*beta)[j] : 0.0f) - mean[j] * a[i];
  }
  return ox.Affine(x, a, b);
}

absl::StatusOr<std::string> LayerNorm(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
                                      const std::string& x, const std::vector<int>& in_t,
                                      const graph::LayerNormOptions& o) {
  const Shape& in = ox.ShapeOf(in_t[0]);
  const auto rank = static_cast<int64_t>(in.size()) + 1;  // with the batch
  int64_t first = rank;
  for (int64_t a : o.axes) first = std::min(first, a < 0 ? a + rank : a);
  Shape norm(in.begin() + (first - 1), in.end());
  int64_t n = 1;
  for (int64_t d : norm) {
    if (d < 0) return OnnxRefusal(l, "normalised axes of open length");
    n *= d;
  }
  const Tensor* gamma = o.scale ? w.Get("gamma") : nullptr;
  const Tensor* beta = o.center ? w.Get("beta") : nullptr;
  const std::string scale = ox.Const(
      "gamma", norm, gamma ? gamma->values() : std::vector<float>(static_cast<size_t>(n), 1));
  const std::string bias =
      ox.Const("beta", norm, beta ? beta->values() : std::vector<float>(static_cast<size_t>(n), 0));
  return ox.Op("LayerNormalization", {x, scale, bias}, {{"axis", first}, {"epsilon", o.epsilon}});
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::BatchNormOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Names{{BatchNorm(ox, a.weights, a.in[0], *OptionsOf<graph::BatchNormOptions>(a.layer))}};
  });
  r.Onnx<graph::LayerNormOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(LayerNorm(ox, a.layer, a.weights, a.in[0], a.in_t,
                               *OptionsOf<graph::LayerNormOptions>(a.layer)));
  });
}

}  // namespace lockstep::trainer::layers::normalization
