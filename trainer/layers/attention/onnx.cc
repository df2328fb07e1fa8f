// The ONNX exporters of the attention family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/attention/attention.h"
#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::attention {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

// x [batch, ..., d] flattened to [batch, seq, d] (the axes between known), or as is.
absl::StatusOr<std::string> Sequence(OnnxBuilder& ox, const Layer& l, const std::string& x,
                                     const Shape& s) {
  if (s.size() == 2) return x;
  int64_t n = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] < 0) return OnnxRefusal(l, "attention over several axes of open length");
    n *= s[i];
  }
  return ox.Op("Reshape", {x, ox.Ints({0, n, s.back()})});
}

// [batch, seq, d] projected by a kernel [d, heads, dim] (+ bias [heads, dim]) into
// [batch, heads, seq, dim].
std::string Project(OnnxBuilder& ox, const std::string& x, const Tensor& kernel,
                    const Tensor* bias) {
  const int64_t d = kernel.dim(0), h = kernel.dim(1), k = kernel.dim(2);
  std::string y = ox.Op("MatMul", {x, ox.Const("kernel", {d, h * k}, kernel.values())});
  if (bias != nullptr) y = ox.Op("Add", {y, ox.Const("bias", {h * k}, bias->values())});
  y = ox.Op("Reshape", {y, ox.Ints({0, 0, h, k})});
  return ox.Op("Transpose", {y}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
}

absl::StatusOr<std::string> Attention(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
                                      const std::vector<std::string>& in,
                                      const std::vector<int>& in_t,
                                      const graph::MultiHeadAttentionOptions& o) {
  const Shape& qs = ox.ShapeOf(in_t[0]);
  const Shape& vs = ox.ShapeOf(in_t[1]);
  const Shape& ks = ox.ShapeOf(in_t.size() > 2 ? in_t[2] : in_t[1]);
  absl::StatusOr<std::string> q = Sequence(ox, l, in[0], qs);
  absl::StatusOr<std::string> v = Sequence(ox, l, in[1], vs);
  absl::StatusOr<std::string> k = Sequence(ox, l, in.size() > 2 ? in[2] : in[1], ks);
  if (!q.ok()) return q;
  if (!v.ok()) return v;
  if (!k.ok()) return k;
  const bool bias = o.use_bias;
  const std::string Q =
      Project(ox, *q, *w.Get("query/kernel"), bias ? w.Get("query/bias") : nullptr);
  const std::string K = Project(ox, *k, *w.Get("key/kernel"), bias ? w.Get("key/bias") : nullptr);
  const std::string V =
      Project(ox, *v, *w.Get("value/kernel"), bias ? w.Get("value/bias") : nullptr);
  const float scale = 1.0f / std::sqrt(static_cast<float>(o.key_dim));
  const std::string Kt =
      ox.Op("Transpose", {K}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});  // [b, h, dim, s]
  std::string scores = ox.Op("MatMul", {ox.Op("Mul", {Q, ox.Scalar(scale)}), Kt});  // [b, h, t, s]
  if (o.use_causal_mask) {
    // -1e9 where key s > query t, as the layer's mask gives: a lower triangle of ones.
    const std::string shape = ox.Op("Shape", {scores}, {{"start", int64_t{2}}});
    const std::string tri =
        ox.Op("Trilu", {ox.Op("Expand", {ox.Scalar(1), shape})}, {{"upper", int64_t{0}}});
    const std::string penalty = ox.Op("Mul", {ox.Op("Sub", {ox.Scalar(1), tri}), ox.Scalar(-1e9f)});
    scores = ox.Op("Add", {scores, penalty});
  }
  const std::string p = ox.Op("Softmax", {scores}, {{"axis", int64_t{-1}}});
  std::string y = ox.Op("MatMul", {p, V});  // [b, h, t, vdim]
  y = ox.Op("Transpose", {y}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  const Tensor& ok = *w.Get("attention_output/kernel");  // [h, vdim, d]
  const int64_t h = ok.dim(0), vd = ok.dim(1), d = ok.dim(2);
  y = ox.Op("Reshape", {y, ox.Ints({0, 0, h * vd})});
  y = ox.Op("MatMul", {y, ox.Const("kernel", {h * vd, d}, ok.values())});
  if (bias) y = ox.Op("Add", {y, ox.Const("bias", *w.Get("attention_output/bias"))});
  if (qs.size() > 2) {
    std::vector<int64_t> back{0};
    for (size_t i = 0; i + 1 < qs.size(); ++i) back.push_back(qs[i]);
    back.push_back(d);
    y = ox.Op("Reshape", {y, ox.Ints(back)});
  }
  return y;
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::MultiHeadAttentionOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(Attention(ox, a.layer, a.weights, a.in, a.in_t,
                               *OptionsOf<graph::MultiHeadAttentionOptions>(a.layer)));
  });
}

}  // namespace lockstep::trainer::layers::attention
