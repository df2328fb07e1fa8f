// The ONNX exporters of the preprocessing family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/preprocessing/augment.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::preprocessing {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

absl::StatusOr<std::string> Normalization(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
                                          const std::string& x,
                                          const graph::NormalizationOptions& o) {
  std::vector<float> mean, var;
  if (o.mean) {
    mean = *o.mean;
    var = *o.variance;
  } else {
    const Tensor* m = w.Get("mean");
    const Tensor* v = w.Get("variance");
    if (m == nullptr || v == nullptr) return OnnxRefusal(l, "no mean and variance");
    mean = m->values();
    var = v->values();
  }
  if (mean.size() != var.size()) {  // one broadcast value against per-channel ones
    const size_t n = std::max(mean.size(), var.size());
    if (mean.size() == 1) mean.assign(n, mean[0]);
    if (var.size() == 1) var.assign(n, var[0]);
  }
  std::vector<float> a(mean.size()), b(mean.size());
  for (size_t i = 0; i < mean.size(); ++i) {
    const float sd = std::max(std::sqrt(var[i]), 1e-7f);  // as the layer floors it
    a[i] = o.invert ? sd : 1.0f / sd;
    b[i] = o.invert ? mean[i] : -mean[i] / sd;
  }
  if (o.invert) return ox.Affine(x, a, b);
  // (x - mean) / sd, in the layer's order of operations.
  const std::string centred =
      ox.Op("Sub", {x, ox.Const("mean", {static_cast<int64_t>(mean.size())}, mean)});
  std::vector<float> sd(mean.size());
  for (size_t i = 0; i < sd.size(); ++i) sd[i] = 1.0f / a[i];
  return ox.Op("Div", {centred, ox.Const("std", {static_cast<int64_t>(sd.size())}, sd)});
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::RescalingOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    const graph::RescalingOptions o = *OptionsOf<graph::RescalingOptions>(a.layer);
    return Names{{ox.Affine(a.in[0], o.scale, o.offset)}};
  });
  r.Onnx<graph::NormalizationOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(Normalization(ox, a.layer, a.weights, a.in[0],
                                   *OptionsOf<graph::NormalizationOptions>(a.layer)));
  });
  // The augmentations are identities in inference.
  const OnnxExporter identity = [](OnnxBuilder&, const OnnxArgs& a) -> Names {
    return Names{{a.in[0]}};
  };
  r.Onnx<graph::FlipOptions>(identity);
  r.Onnx<graph::RotationOptions>(identity);
}

}  // namespace lockstep::trainer::layers::preprocessing
