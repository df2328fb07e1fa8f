// The ONNX exporters of the core family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/core/core.h"
#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::core {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

// Keras's ReLU layer: x above threshold (capped at max_value), slope * (x - threshold) below.
std::string Relu(OnnxBuilder& ox, const std::string& x, const graph::ReluOptions& r) {
  std::string y;
  if (r.threshold == 0 && r.negative_slope == 0) {
    y = ox.Op("Relu", {x});
  } else {
    const std::string below =
        ox.Op("Mul", {ox.Op("Sub", {x, ox.Scalar(r.threshold)}), ox.Scalar(r.negative_slope)});
    y = ox.Op("Where", {ox.Op("GreaterOrEqual", {x, ox.Scalar(r.threshold)}), x, below});
  }
  if (r.max_value < 3e38f) y = ox.Op("Min", {y, ox.Scalar(r.max_value)});
  return y;
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::DenseOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    const graph::DenseOptions d = *OptionsOf<graph::DenseOptions>(a.layer);
    std::string y = ox.Op("MatMul", {a.in[0], ox.Const("kernel", *a.weights.Get("kernel"))});
    if (d.use_bias) y = ox.Op("Add", {y, ox.Const("bias", *a.weights.Get("bias"))});
    return OneOutput(ox.Act(a.layer, y, d.activation));
  });
  r.Onnx<Activation>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(ox.Act(a.layer, a.in[0], *OptionsOf<Activation>(a.layer)));
  });
  r.Onnx<graph::ReluOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Names{{Relu(ox, a.in[0], *OptionsOf<graph::ReluOptions>(a.layer))}};
  });
  r.Onnx<graph::EmbeddingOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    if (OptionsOf<graph::EmbeddingOptions>(a.layer)->mask_zero) {
      return OnnxRefusal(a.layer, "mask_zero (masks are not exported)");
    }
    const std::string ids = ox.Op("Cast", {a.in[0]}, {{"to", int64_t{onnx::TensorProto::INT64}}});
    return Names{{ox.Op("Gather", {ox.Const("embeddings", *a.weights.Get("embeddings")), ids})}};
  });
}

}  // namespace lockstep::trainer::layers::core
