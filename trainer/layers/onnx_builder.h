#pragma once
// OnnxBuilder: a graph model's inference graph written as ONNX (model/onnx_export.h), node by
// node through each layer's exporter, which its family registered (layers/registry.h); and the
// building blocks those exporters write with: nodes, initializers, activations, layout
// transposes, window attributes. A layer of a family without an exporter is Unimplemented,
// naming it.
// Thread-safety: one builder per export.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/graph.h"
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/registry.h"
#include "trainer/proto/onnx.pb.h"

namespace lockstep::trainer::layers {

// Slice bounds meaning "to the end" and "past the start".
inline constexpr int64_t kOnnxIndexMax = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kOnnxIndexMin = std::numeric_limits<int64_t>::min();

// An attribute of a node.
struct OnnxAttr {
  std::string name;
  std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
               std::vector<std::string>>
      value;
};

// Where a layer's weights are: the layer itself, or a wrapper holding them under a prefix.
struct OnnxWeights {
  const graph::Layer* holder;
  std::string prefix;
  const Tensor* Get(const std::string& name) const {
    for (const graph::Weight& w : holder->weights()) {
      if (w.name == prefix + name) return &w.value;
    }
    return nullptr;
  }
};

// Tensor `t` with its axes permuted: out axis j is in axis perm[j].
Tensor Permute(const Tensor& t, const std::vector<size_t>& perm);

class OnnxBuilder {
 public:
  explicit OnnxBuilder(graph::Graph& g) : g_(g) {}

  // The whole graph into `model` (opset 17, IR version 8), `name` the graph's name.
  absl::Status Build(const std::string& name, onnx::ModelProto* model);
  // "input" for a model of one input, else the Keras inputs' names; "output", or "output_k".
  std::string InputName(size_t i) const {
    return g_.num_inputs() == 1 ? "input" : "input_" + g_.input_name(i);
  }
  std::string OutputName(size_t k) const {
    return g_.outputs().size() == 1 ? "output" : "output_" + std::to_string(k);
  }

  // Layer `l`'s nodes from its inputs' value names `in` (tensors `in_t`, outputs `out_t`): its
  // family's exporter; returns its outputs' value names.
  absl::StatusOr<std::vector<std::string>> Export(const graph::Layer& l, const OnnxWeights& w,
                                                  const std::vector<std::string>& in,
                                                  const std::vector<int>& in_t,
                                                  const std::vector<int>& out_t);
  // A TimeDistributed's inner layer on one step's shapes `in` and `out` (its tensors numbered
  // -1 and -2 while it exports).
  absl::StatusOr<std::vector<std::string>> InnerStep(const graph::Layer& inner,
                                                     const OnnxWeights& w, const std::string& x,
                                                     const Shape& in, const Shape& out);

  // ---- Building blocks for the exporters ------------------------------------------------

  std::string Fresh(const std::string& hint) { return absl::StrCat(hint, "_", ++counter_); }

  // A node; returns its first output (named `out`, or fresh).
  std::string Op(const std::string& type, const std::vector<std::string>& in,
                 const std::vector<OnnxAttr>& attrs = {}, const std::string& out = "") {
    return OpN(type, in, 1, attrs, out)[0];
  }
  std::vector<std::string> OpN(const std::string& type, const std::vector<std::string>& in,
                               int outputs, const std::vector<OnnxAttr>& attrs = {},
                               const std::string& out = "") {
    onnx::NodeProto* n = graph_->add_node();
    n->set_op_type(type);
    n->set_name(Fresh(type));
    for (const std::string& i : in) n->add_input(i);
    std::vector<std::string> names;
    for (int k = 0; k < outputs; ++k) {
      names.push_back(k == 0 && !out.empty() ? out : Fresh(type + "_out"));
      n->add_output(names.back());
    }
    for (const OnnxAttr& a : attrs) {
      onnx::AttributeProto* p = n->add_attribute();
      p->set_name(a.name);
      if (const auto* i = std::get_if<int64_t>(&a.value)) {
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(*i);
      } else if (const auto* f = std::get_if<float>(&a.value)) {
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(*f);
      } else if (const auto* s = std::get_if<std::string>(&a.value)) {
        p->set_type(onnx::AttributeProto::STRING);
        p->set_s(*s);
      } else if (const auto* is = std::get_if<std::vector<int64_t>>(&a.value)) {
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : *is) p->add_ints(v);
      } else if (const auto* fs = std::get_if<std::vector<float>>(&a.value)) {
        p->set_type(onnx::AttributeProto::FLOATS);
        for (float v : *fs) p->add_floats(v);
      } else if (const auto* ss = std::get_if<std::vector<std::string>>(&a.value)) {
        p->set_type(onnx::AttributeProto::STRINGS);
        for (const std::string& v : *ss) p->add_strings(v);
      }
    }
    return names;
  }

  // A float32 initializer.
  std::string Const(const std::string& hint, const Shape& shape, const std::vector<float>& v) {
    onnx::TensorProto* t = graph_->add_initializer();
    const std::string name = Fresh(hint);
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return name;
  }
  std::string Const(const std::string& hint, const Tensor& t) {
    return Const(hint, t.shape(), t.values());
  }
  std::string Scalar(float v) { return Const("scalar", {}, {v}); }
  // An int64 vector initializer (shapes, axes, pads).
  std::string Ints(const std::vector<int64_t>& v) {
    onnx::TensorProto* t = graph_->add_initializer();
    const std::string name = Fresh("ints");
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return name;
  }

  absl::StatusOr<std::string> Act(const graph::Layer& l, const std::string& x,
                                  const Activation& a) {
    switch (a.kind) {
      case Act::kLinear:
        return x;
      case Act::kRelu:
        return Op("Relu", {x});
      case Act::kRelu6:
        return Op("Clip", {x, Scalar(0), Scalar(6)});
      case Act::kSigmoid:
        return Op("Sigmoid", {x});
      case Act::kHardSigmoid2:
        return Op("HardSigmoid", {x}, {{"alpha", 0.2f}, {"beta", 0.5f}});
      case Act::kHardSigmoid3:
        return Op("HardSigmoid", {x}, {{"alpha", 1.0f / 6.0f}, {"beta", 0.5f}});
      case Act::kTanh:
        return Op("Tanh", {x});
      case Act::kSoftmax:
        return Op("Softmax", {x}, {{"axis", int64_t{-1}}});
      case Act::kSwish:
        return Op("Mul", {x, Op("Sigmoid", {x})});
      case Act::kGelu: {  // x / 2 * (1 + erf(x / sqrt 2))
        const std::string e = Op("Erf", {Op("Mul", {x, Scalar(static_cast<float>(M_SQRT1_2))})});
        return Op("Mul", {Op("Mul", {x, Scalar(0.5f)}), Op("Add", {e, Scalar(1)})});
      }
      case Act::kGeluTanh: {  // x / 2 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        const std::string x3 = Op("Mul", {Op("Mul", {x, x}), x});
        const std::string inner = Op("Add", {x, Op("Mul", {x3, Scalar(0.044715f)})});
        const std::string t =
            Op("Tanh", {Op("Mul", {inner, Scalar(static_cast<float>(std::sqrt(2.0 / M_PI)))})});
        return Op("Mul", {Op("Mul", {x, Scalar(0.5f)}), Op("Add", {t, Scalar(1)})});
      }
      case Act::kElu:
        return Op("Elu", {x}, {{"alpha", a.alpha}});
      case Act::kSelu:
        return Op("Selu", {x});
      case Act::kSoftplus:
        return Op("Softplus", {x});
      case Act::kSoftsign:
        return Op("Softsign", {x});
      case Act::kExponential:
        return Op("Exp", {x});
      case Act::kLeakyRelu:
        return Op("LeakyRelu", {x}, {{"alpha", a.alpha}});
      case Act::kHardSwish:
        return Op("HardSwish", {x});
      case Act::kMish:
        return Op("Mul", {x, Op("Tanh", {Op("Softplus", {x})})});
    }
    return OnnxRefusal(l, "activation " + graph::ActivationName(a));
  }

  // x * a + b along the last axis (a, b per channel or scalars).
  std::string Affine(const std::string& x, const std::vector<float>& a,
                     const std::vector<float>& b) {
    const std::string y = Op("Mul", {x, Const("scale", {static_cast<int64_t>(a.size())}, a)});
    return Op("Add", {y, Const("offset", {static_cast<int64_t>(b.size())}, b)});
  }

  // Channels-last [batch, spatial..., c] <-> channels-first [batch, c, spatial...].
  std::string ToChannelsFirst(const std::string& x, int rank) {
    std::vector<int64_t> perm{0, rank + 1};
    for (int i = 1; i <= rank; ++i) perm.push_back(i);
    return Op("Transpose", {x}, {{"perm", perm}});
  }
  std::string ToChannelsLast(const std::string& x, int rank) {
    std::vector<int64_t> perm{0};
    for (int i = 2; i <= rank + 1; ++i) perm.push_back(i);
    perm.push_back(1);
    return Op("Transpose", {x}, {{"perm", perm}});
  }

  // A Keras kernel [k..., in, out] as ONNX's [out, in, k...].
  static Tensor ConvKernel(const Tensor& k, int rank) {
    std::vector<size_t> perm{static_cast<size_t>(rank + 1), static_cast<size_t>(rank)};
    for (int i = 0; i < rank; ++i) perm.push_back(static_cast<size_t>(i));
    return Permute(k, perm);
  }

  // The pads attribute of a windowed op over `in` (spatial lengths, -1 open), or auto_pad.
  absl::StatusOr<std::vector<OnnxAttr>> WindowAttrs(const Shape& in_shape, int rank,
                                                    const std::vector<int64_t>& kernel,
                                                    const std::vector<int64_t>& strides,
                                                    const std::vector<int64_t>& dilation,
                                                    graph::Padding padding, bool with_dilation) {
    std::vector<OnnxAttr> attrs{{"kernel_shape", kernel}, {"strides", strides}};
    if (with_dilation) attrs.push_back({"dilations", dilation});
    std::vector<int64_t> before, after;
    for (int i = 0; i < rank; ++i) {
      const auto u = static_cast<size_t>(i);
      const int64_t in = in_shape[u];
      const int64_t span = (kernel[u] - 1) * dilation[u] + 1;
      if (padding == graph::Padding::kValid) {
        before.push_back(0);
        after.push_back(0);
      } else if (padding == graph::Padding::kCausal) {
        before.push_back(span - 1);
        after.push_back(0);
      } else if (in < 0) {
        attrs.push_back({"auto_pad", std::string("SAME_UPPER")});
        return attrs;
      } else {
        const graph::AxisGeometry g =
            graph::WindowAxis(in, kernel[u], strides[u], dilation[u], padding);
        const int64_t total = std::max<int64_t>((g.out - 1) * strides[u] + span - in, 0);
        before.push_back(g.pad_before);
        after.push_back(total - g.pad_before);
      }
    }
    std::vector<int64_t> pads = before;
    pads.insert(pads.end(), after.begin(), after.end());
    attrs.push_back({"pads", pads});
    return attrs;
  }

  // A tensor's per-example shape; -1 and -2 are a TimeDistributed step's input and output.
  const Shape& ShapeOf(int t) const {
    if (t == -1) return step_shapes_.at(0);
    if (t == -2) return step_shapes_.at(1);
    return g_.shape(t);
  }

 private:
  int TensorCount() const {
    int n = 0;
    for (int t : g_.inputs()) n = std::max(n, t + 1);
    for (size_t i = 0; i < g_.num_nodes(); ++i) {
      for (int t : g_.node(i).outputs) n = std::max(n, t + 1);
    }
    return n;
  }

  // [batch, shape...] float32, the batch symbolic, open axes unnamed.
  static void Declare(onnx::ValueInfoProto* v, const std::string& name, const Shape& shape) {
    v->set_name(name);
    onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    onnx::TensorShapeProto* s = t->mutable_shape();
    s->add_dim()->set_dim_param("batch");
    for (int64_t d : shape) {
      auto* dim = s->add_dim();
      if (d > 0) dim->set_dim_value(d);
    }
  }

  graph::Graph& g_;
  onnx::GraphProto* graph_ = nullptr;
  std::vector<std::string> values_;
  std::vector<Shape> step_shapes_;
  int counter_ = 0;
};

// An exporter's one output value name, or its error.
inline absl::StatusOr<std::vector<std::string>> OneOutput(absl::StatusOr<std::string> s) {
  if (!s.ok()) return s.status();
  return std::vector<std::string>{*s};
}

// What a family's exporter gets for one call of `layer`.
struct OnnxArgs {
  const graph::Layer& layer;
  const OnnxWeights& weights;
  const std::vector<std::string>& in;  // the inputs' value names
  const std::vector<int>& in_t;        // their tensors (ShapeOf)
  const std::vector<int>& out_t;       // the outputs' tensors
};

}  // namespace lockstep::trainer::layers
