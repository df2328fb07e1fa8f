#include "trainer/model/onnx_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "trainer/graph/layers/attention.h"
#include "trainer/graph/layers/conv.h"
#include "trainer/graph/layers/core.h"
#include "trainer/graph/layers/normalization.h"
#include "trainer/graph/layers/pooling.h"
#include "trainer/graph/layers/recurrent.h"
#include "trainer/proto/onnx.pb.h"

namespace lockstep::trainer {
namespace {

using graph::Layer;
using graph::OptionsOf;
using graph::Padding;

constexpr int64_t kOpset = 17;
constexpr int64_t kIrVersion = 8;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

absl::Status Refuse(const Layer& l, const std::string& why) {
  return absl::UnimplementedError("layer '" + l.name() + "' (" + l.class_name() +
                                  ") has no ONNX export: " + why);
}

// An attribute of a node.
struct Attr {
  std::string name;
  std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
               std::vector<std::string>>
      value;
};

// Where a layer's weights are: the layer itself, or a wrapper holding them under a prefix.
struct Weights {
  const Layer* holder;
  std::string prefix;
  const Tensor* Get(const std::string& name) const {
    for (const graph::Weight& w : holder->weights()) {
      if (w.name == prefix + name) return &w.value;
    }
    return nullptr;
  }
};

// Tensor `t` with its axes permuted: out axis j is in axis perm[j].
Tensor Permute(const Tensor& t, const std::vector<size_t>& perm) {
  const Shape& in = t.shape();
  const size_t r = in.size();
  Shape out(r);
  for (size_t j = 0; j < r; ++j) out[j] = in[perm[j]];
  std::vector<int64_t> in_stride(r, 1);
  for (size_t k = r - 1; k-- > 0;) in_stride[k] = in_stride[k + 1] * in[k + 1];
  Tensor o(out);
  std::vector<int64_t> idx(r, 0);
  for (int64_t n = 0; n < o.size(); ++n) {
    int64_t src = 0;
    for (size_t j = 0; j < r; ++j) src += idx[j] * in_stride[perm[j]];
    o[n] = t[src];
    for (size_t j = r; j-- > 0;) {
      if (++idx[j] < out[j]) break;
      idx[j] = 0;
    }
  }
  return o;
}

class Exporter {
 public:
  explicit Exporter(graph::Graph& g) : g_(g) {}

  absl::Status Build(const std::string& name, onnx::ModelProto* model) {
    model->set_ir_version(kIrVersion);
    model->set_producer_name("lockstep-trainer");
    model->set_doc_string("A Keras model trained by Lockstep, as its inference graph.");
    onnx::OperatorSetIdProto* opset = model->add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    graph_ = model->mutable_graph();
    graph_->set_name(name.empty() ? "model" : name);
    values_.assign(static_cast<size_t>(TensorCount()), "");
    for (size_t i = 0; i < g_.num_inputs(); ++i) {
      const int in = g_.inputs()[i];
      const std::string n = InputName(i);
      values_[static_cast<size_t>(in)] = n;
      Declare(graph_->add_input(), n, g_.shape(in));
    }
    for (size_t i = 0; i < g_.num_nodes(); ++i) {
      const graph::Graph::NodeSpec n = g_.node(i);
      std::vector<std::string> ins;
      for (int t : n.inputs) ins.push_back(values_[static_cast<size_t>(t)]);
      absl::StatusOr<std::vector<std::string>> outs =
          Export(*n.layer, Weights{n.layer, ""}, ins, n.inputs, n.outputs);
      if (!outs.ok()) return outs.status();
      if (outs->size() != n.outputs.size()) {
        return absl::InternalError("layer '" + n.layer->name() + "': exported " +
                                   std::to_string(outs->size()) + " outputs of " +
                                   std::to_string(n.outputs.size()));
      }
      for (size_t k = 0; k < outs->size(); ++k) {
        values_[static_cast<size_t>(n.outputs[k])] = (*outs)[k];
      }
    }
    for (size_t k = 0; k < g_.outputs().size(); ++k) {
      const int out = g_.outputs()[k];
      const std::string n = OutputName(k);
      Op("Identity", {values_[static_cast<size_t>(out)]}, {}, n);
      Declare(graph_->add_output(), n, g_.shape(out));
    }
    return absl::OkStatus();
  }

  // "input" for a model of one input, else the Keras inputs' names; "output", or "output_k".
  std::string InputName(size_t i) const {
    return g_.num_inputs() == 1 ? "input" : "input_" + g_.input_name(i);
  }
  std::string OutputName(size_t k) const {
    return g_.outputs().size() == 1 ? "output" : "output_" + std::to_string(k);
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

  std::string Fresh(const std::string& hint) { return absl::StrCat(hint, "_", ++counter_); }

  // A node; returns its first output (named `out`, or fresh).
  std::string Op(const std::string& type, const std::vector<std::string>& in,
                 const std::vector<Attr>& attrs = {}, const std::string& out = "") {
    return OpN(type, in, 1, attrs, out)[0];
  }
  std::vector<std::string> OpN(const std::string& type, const std::vector<std::string>& in,
                               int outputs, const std::vector<Attr>& attrs = {},
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
    for (const Attr& a : attrs) {
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

  // ---- Building blocks -----------------------------------------------------------------------

  absl::StatusOr<std::string> Act(const Layer& l, const std::string& x, const Activation& a) {
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
    return Refuse(l, "activation " + graph::ActivationName(a));
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
  absl::StatusOr<std::vector<Attr>> WindowAttrs(const Shape& in_shape, int rank,
                                                const std::vector<int64_t>& kernel,
                                                const std::vector<int64_t>& strides,
                                                const std::vector<int64_t>& dilation,
                                                Padding padding, bool with_dilation) {
    std::vector<Attr> attrs{{"kernel_shape", kernel}, {"strides", strides}};
    if (with_dilation) attrs.push_back({"dilations", dilation});
    std::vector<int64_t> before, after;
    for (int i = 0; i < rank; ++i) {
      const auto u = static_cast<size_t>(i);
      const int64_t in = in_shape[u];
      const int64_t span = (kernel[u] - 1) * dilation[u] + 1;
      if (padding == Padding::kValid) {
        before.push_back(0);
        after.push_back(0);
      } else if (padding == Padding::kCausal) {
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

  // ---- Layers --------------------------------------------------------------------------------

  absl::StatusOr<std::vector<std::string>> Export(const Layer& l, const Weights& w,
                                                  const std::vector<std::string>& in,
                                                  const std::vector<int>& in_t,
                                                  const std::vector<int>& out_t) {
    using R = std::vector<std::string>;
    auto one = [](absl::StatusOr<std::string> s) -> absl::StatusOr<R> {
      if (!s.ok()) return s.status();
      return R{*s};
    };
    const std::string& cls = l.class_name();
    if (auto d = OptionsOf<graph::DenseOptions>(l)) {
      std::string y = Op("MatMul", {in[0], Const("kernel", *w.Get("kernel"))});
      if (d->use_bias) y = Op("Add", {y, Const("bias", *w.Get("bias"))});
      return one(Act(l, y, d->activation));
    }
    if (auto a = OptionsOf<Activation>(l)) return one(Act(l, in[0], *a));
    if (auto r = OptionsOf<graph::ReluOptions>(l)) return one(Relu(in[0], *r));
    if (cls == "Flatten") return R{Op("Flatten", {in[0]}, {{"axis", int64_t{1}}})};
    if (cls == "Reshape") {
      const Shape& target = ShapeOf(out_t[0]);
      if (std::count(target.begin(), target.end(), -1) > 1) {
        return Refuse(l, "a target shape with more than one open axis");
      }
      std::vector<int64_t> shape{0};
      shape.insert(shape.end(), target.begin(), target.end());
      return R{Op("Reshape", {in[0], Ints(shape)})};
    }
    if (cls == "RepeatVector") {
      const int64_t n = ShapeOf(out_t[0])[0];
      return R{Op("Tile", {Op("Unsqueeze", {in[0], Ints({1})}), Ints({1, n, 1})})};
    }
    if (OptionsOf<graph::DropoutOptions>(l) || OptionsOf<graph::GaussianNoiseOptions>(l) ||
        cls == "RandomFlip" || cls == "RandomRotation") {
      return R{in[0]};  // identities in inference
    }
    if (auto r = OptionsOf<graph::RescalingOptions>(l))
      return R{Affine(in[0], r->scale, r->offset)};
    if (auto n = OptionsOf<graph::NormalizationOptions>(l))
      return one(Normalization(l, w, in[0], *n));
    if (auto m = OptionsOf<MergeOp>(l)) return R{Merge(*m, in)};
    if (auto c = OptionsOf<graph::ConcatOptions>(l))
      return R{Op("Concat", in, {{"axis", c->axis}})};
    if (auto c = OptionsOf<graph::ConvOptions>(l)) return one(Conv(l, w, in[0], in_t, *c));
    if (auto d = OptionsOf<graph::DepthwiseOptions>(l))
      return one(Depthwise(l, w, in[0], in_t, *d));
    if (auto s = OptionsOf<graph::SeparableOptions>(l))
      return one(Separable(l, w, in[0], in_t, *s));
    if (auto t = OptionsOf<graph::ConvTransposeOptions>(l)) {
      return one(ConvTranspose(l, w, in[0], in_t, *t));
    }
    if (auto p = OptionsOf<graph::PoolOptions>(l)) return one(Pool(in[0], in_t, *p));
    if (auto p = OptionsOf<graph::GlobalPoolOptions>(l)) {
      std::vector<int64_t> axes;
      for (int i = 1; i <= p->rank; ++i) axes.push_back(i);
      return R{Op(p->mode == graph::PoolMode::kMax ? "ReduceMax" : "ReduceMean", {in[0]},
                  {{"axes", axes}, {"keepdims", int64_t{p->keepdims ? 1 : 0}}})};
    }
    if (auto b = OptionsOf<graph::BatchNormOptions>(l)) return R{BatchNorm(w, in[0], *b)};
    if (auto n = OptionsOf<graph::LayerNormOptions>(l))
      return one(LayerNorm(l, w, in[0], in_t, *n));
    if (auto p = OptionsOf<graph::PadCropOptions>(l)) return R{PadCrop(in[0], *p)};
    if (auto u = OptionsOf<graph::UpSamplingOptions>(l)) return R{UpSampling(in[0], *u)};
    if (auto e = OptionsOf<graph::EmbeddingOptions>(l)) {
      if (e->mask_zero) return Refuse(l, "mask_zero (masks are not exported)");
      const std::string ids = Op("Cast", {in[0]}, {{"to", int64_t{onnx::TensorProto::INT64}}});
      return R{Op("Gather", {Const("embeddings", *w.Get("embeddings")), ids})};
    }
    if (OptionsOf<graph::MaskingOptions>(l) || OptionsOf<graph::CompareOptions>(l) ||
        OptionsOf<graph::MaskWithOptions>(l)) {
      return Refuse(l, "masks are not exported");
    }
    if (OptionsOf<graph::RnnOptions>(l)) return Rnn(l, w, in);
    if (auto b = OptionsOf<graph::BidirectionalOptions>(l)) return Bidirectional(l, *b, in);
    if (auto a = OptionsOf<graph::MultiHeadAttentionOptions>(l)) {
      return one(Attention(l, w, in, in_t, *a));
    }
    if (auto t = OptionsOf<graph::TimeDistributedOptions>(l)) {
      return TimeDistributed(l, *t, in, in_t, out_t);
    }
    return Refuse(l, "no ONNX form of this layer class yet");
  }

  // Keras's ReLU layer: x above threshold (capped at max_value), slope * (x - threshold) below.
  std::string Relu(const std::string& x, const graph::ReluOptions& r) {
    std::string y;
    if (r.threshold == 0 && r.negative_slope == 0) {
      y = Op("Relu", {x});
    } else {
      const std::string below =
          Op("Mul", {Op("Sub", {x, Scalar(r.threshold)}), Scalar(r.negative_slope)});
      y = Op("Where", {Op("GreaterOrEqual", {x, Scalar(r.threshold)}), x, below});
    }
    if (r.max_value < 3e38f) y = Op("Min", {y, Scalar(r.max_value)});
    return y;
  }

  absl::StatusOr<std::string> Normalization(const Layer& l, const Weights& w, const std::string& x,
                                            const graph::NormalizationOptions& o) {
    std::vector<float> mean, var;
    if (o.mean) {
      mean = *o.mean;
      var = *o.variance;
    } else {
      const Tensor* m = w.Get("mean");
      const Tensor* v = w.Get("variance");
      if (m == nullptr || v == nullptr) return Refuse(l, "no mean and variance");
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
    if (o.invert) return Affine(x, a, b);
    // (x - mean) / sd, in the layer's order of operations.
    const std::string centred =
        Op("Sub", {x, Const("mean", {static_cast<int64_t>(mean.size())}, mean)});
    std::vector<float> sd(mean.size());
    for (size_t i = 0; i < sd.size(); ++i) sd[i] = 1.0f / a[i];
    return Op("Div", {centred, Const("std", {static_cast<int64_t>(sd.size())}, sd)});
  }

  std::string Merge(MergeOp m, const std::vector<std::string>& in) {
    switch (m) {
      case MergeOp::kAdd:
        return Op("Sum", in);
      case MergeOp::kSubtract:
        return Op("Sub", {in[0], in[1]});
      case MergeOp::kMultiply: {
        std::string y = in[0];
        for (size_t i = 1; i < in.size(); ++i) y = Op("Mul", {y, in[i]});
        return y;
      }
      case MergeOp::kAverage:
        return Op("Mean", in);
      case MergeOp::kMaximum:
        return Op("Max", in);
      case MergeOp::kMinimum:
        return Op("Min", in);
    }
    return in[0];
  }

  absl::StatusOr<std::string> Conv(const Layer& l, const Weights& w, const std::string& x,
                                   const std::vector<int>& in_t, const graph::ConvOptions& o) {
    absl::StatusOr<std::vector<Attr>> attrs = WindowAttrs(
        ShapeOf(in_t[0]), o.rank, o.kernel_size, o.strides, o.dilation_rate, o.padding, true);
    if (!attrs.ok()) return attrs.status();
    std::vector<std::string> ins{ToChannelsFirst(x, o.rank),
                                 Const("kernel", ConvKernel(*w.Get("kernel"), o.rank))};
    if (o.use_bias) ins.push_back(Const("bias", *w.Get("bias")));
    return Act(l, ToChannelsLast(Op("Conv", ins, *attrs), o.rank), o.activation);
  }

  // Keras's depthwise kernel [k..., c, m] as a grouped convolution's [c * m, 1, k...].
  static Tensor DepthwiseKernel(const Tensor& k, int rank) {
    std::vector<size_t> perm{static_cast<size_t>(rank), static_cast<size_t>(rank + 1)};
    for (int i = 0; i < rank; ++i) perm.push_back(static_cast<size_t>(i));
    Tensor p = Permute(k, perm);  // [c, m, k...]
    Shape s{p.dim(0) * p.dim(1), 1};
    for (int i = 0; i < rank; ++i) s.push_back(p.dim(static_cast<size_t>(i + 2)));
    return Tensor(s, p.values());
  }

  absl::StatusOr<std::string> DepthwiseOp(const Weights& w, const std::string& xcf,
                                          const std::vector<int>& in_t, int rank,
                                          const std::vector<int64_t>& kernel,
                                          const std::vector<int64_t>& strides,
                                          const std::vector<int64_t>& dilation, Padding padding,
                                          const char* weight, const Tensor* bias) {
    absl::StatusOr<std::vector<Attr>> attrs =
        WindowAttrs(ShapeOf(in_t[0]), rank, kernel, strides, dilation, padding, true);
    if (!attrs.ok()) return attrs.status();
    const int64_t channels = ShapeOf(in_t[0]).back();
    attrs->push_back({"group", channels});
    std::vector<std::string> ins{xcf, Const("depthwise", DepthwiseKernel(*w.Get(weight), rank))};
    if (bias != nullptr) ins.push_back(Const("bias", *bias));
    return Op("Conv", ins, *attrs);
  }

  absl::StatusOr<std::string> Depthwise(const Layer& l, const Weights& w, const std::string& x,
                                        const std::vector<int>& in_t,
                                        const graph::DepthwiseOptions& o) {
    const char* name = w.Get("depthwise_kernel") != nullptr ? "depthwise_kernel" : "kernel";
    absl::StatusOr<std::string> y =
        DepthwiseOp(w, ToChannelsFirst(x, o.rank), in_t, o.rank, o.kernel_size, o.strides,
                    o.dilation_rate, o.padding, name, o.use_bias ? w.Get("bias") : nullptr);
    if (!y.ok()) return y;
    return Act(l, ToChannelsLast(*y, o.rank), o.activation);
  }

  absl::StatusOr<std::string> Separable(const Layer& l, const Weights& w, const std::string& x,
                                        const std::vector<int>& in_t,
                                        const graph::SeparableOptions& o) {
    absl::StatusOr<std::string> d =
        DepthwiseOp(w, ToChannelsFirst(x, o.rank), in_t, o.rank, o.kernel_size, o.strides,
                    o.dilation_rate, o.padding, "depthwise_kernel", nullptr);
    if (!d.ok()) return d;
    std::vector<std::string> ins{
        *d, Const("pointwise", ConvKernel(*w.Get("pointwise_kernel"), o.rank))};
    if (o.use_bias) ins.push_back(Const("bias", *w.Get("bias")));
    return Act(l, ToChannelsLast(Op("Conv", ins), o.rank), o.activation);
  }

  absl::StatusOr<std::string> ConvTranspose(const Layer& l, const Weights& w, const std::string& x,
                                            const std::vector<int>& in_t,
                                            const graph::ConvTransposeOptions& o) {
    const Shape& in = ShapeOf(in_t[0]);
    std::vector<int64_t> before, after, extra;
    for (int i = 0; i < o.rank; ++i) {
      const auto u = static_cast<size_t>(i);
      const int64_t len = in[u], k = o.kernel_size[u], s = o.strides[u];
      if (len < 0) return Refuse(l, "an input of open length");
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
    std::vector<Attr> attrs{{"kernel_shape", o.kernel_size},
                            {"strides", o.strides},
                            {"pads", pads},
                            {"output_padding", extra}};
    // Keras's [k..., out, in] is ONNX's [in, out, k...]: the same permutation as a convolution's.
    std::vector<std::string> ins{ToChannelsFirst(x, o.rank),
                                 Const("kernel", ConvKernel(*w.Get("kernel"), o.rank))};
    if (o.use_bias) ins.push_back(Const("bias", *w.Get("bias")));
    return Act(l, ToChannelsLast(Op("ConvTranspose", ins, attrs), o.rank), o.activation);
  }

  absl::StatusOr<std::string> Pool(const std::string& x, const std::vector<int>& in_t,
                                   const graph::PoolOptions& o) {
    absl::StatusOr<std::vector<Attr>> attrs =
        WindowAttrs(ShapeOf(in_t[0]), o.rank, o.pool_size, o.strides,
                    std::vector<int64_t>(static_cast<size_t>(o.rank), 1), o.padding, false);
    if (!attrs.ok()) return attrs.status();
    const bool max = o.mode == graph::PoolMode::kMax;
    if (!max) attrs->push_back({"count_include_pad", int64_t{0}});
    return ToChannelsLast(Op(max ? "MaxPool" : "AveragePool", {ToChannelsFirst(x, o.rank)}, *attrs),
                          o.rank);
  }

  std::string BatchNorm(const Weights& w, const std::string& x, const graph::BatchNormOptions& o) {
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
    return Affine(x, a, b);
  }

  absl::StatusOr<std::string> LayerNorm(const Layer& l, const Weights& w, const std::string& x,
                                        const std::vector<int>& in_t,
                                        const graph::LayerNormOptions& o) {
    const Shape& in = ShapeOf(in_t[0]);
    const auto rank = static_cast<int64_t>(in.size()) + 1;  // with the batch
    int64_t first = rank;
    for (int64_t a : o.axes) first = std::min(first, a < 0 ? a + rank : a);
    Shape norm(in.begin() + (first - 1), in.end());
    int64_t n = 1;
    for (int64_t d : norm) {
      if (d < 0) return Refuse(l, "normalised axes of open length");
      n *= d;
    }
    const Tensor* gamma = o.scale ? w.Get("gamma") : nullptr;
    const Tensor* beta = o.center ? w.Get("beta") : nullptr;
    const std::string scale = Const(
        "gamma", norm, gamma ? gamma->values() : std::vector<float>(static_cast<size_t>(n), 1));
    const std::string bias =
        Const("beta", norm, beta ? beta->values() : std::vector<float>(static_cast<size_t>(n), 0));
    return Op("LayerNormalization", {x, scale, bias}, {{"axis", first}, {"epsilon", o.epsilon}});
  }

  std::string PadCrop(const std::string& x, const graph::PadCropOptions& o) {
    if (o.pad) {
      std::vector<int64_t> pads(static_cast<size_t>(2 * (o.rank + 2)), 0);
      for (int i = 0; i < o.rank; ++i) {
        pads[static_cast<size_t>(1 + i)] = o.pairs[static_cast<size_t>(i)].first;
        pads[static_cast<size_t>(o.rank + 2 + 1 + i)] = o.pairs[static_cast<size_t>(i)].second;
      }
      return Op("Pad", {x, Ints(pads)}, {{"mode", std::string("constant")}});
    }
    std::vector<int64_t> starts, ends, axes;
    for (int i = 0; i < o.rank; ++i) {
      const auto& [b, a] = o.pairs[static_cast<size_t>(i)];
      starts.push_back(b);
      ends.push_back(a == 0 ? kMax : -a);
      axes.push_back(1 + i);
    }
    return Op("Slice", {x, Ints(starts), Ints(ends), Ints(axes)});
  }

  std::string UpSampling(const std::string& x, const graph::UpSamplingOptions& o) {
    std::vector<float> scales{1};
    for (int64_t s : o.size) scales.push_back(static_cast<float>(s));
    scales.push_back(1);
    const std::string sc = Const("scales", {static_cast<int64_t>(scales.size())}, scales);
    if (o.interpolation == graph::Interpolation::kBilinear) {
      return Op("Resize", {x, "", sc},
                {{"mode", std::string("linear")},
                 {"coordinate_transformation_mode", std::string("half_pixel")}});
    }
    return Op("Resize", {x, "", sc},
              {{"mode", std::string("nearest")},
               {"coordinate_transformation_mode", std::string("asymmetric")},
               {"nearest_mode", std::string("floor")}});
  }

  // ---- Recurrent layers -------------------------------------------------------------------

  // ONNX's name and alpha/beta for a recurrent activation (nullopt: none).
  struct RnnAct {
    std::string name;
    std::optional<float> alpha, beta;
  };
  static std::optional<RnnAct> RecurrentActivation(const Activation& a) {
    switch (a.kind) {
      case Act::kTanh:
        return RnnAct{"Tanh", {}, {}};
      case Act::kSigmoid:
        return RnnAct{"Sigmoid", {}, {}};
      case Act::kRelu:
        return RnnAct{"Relu", {}, {}};
      case Act::kHardSigmoid2:
        return RnnAct{"HardSigmoid", 0.2f, 0.5f};
      case Act::kHardSigmoid3:
        return RnnAct{"HardSigmoid", 1.0f / 6.0f, 0.5f};
      case Act::kLinear:
        return RnnAct{"Affine", 1.0f, 0.0f};
      case Act::kSoftsign:
        return RnnAct{"Softsign", {}, {}};
      case Act::kSoftplus:
        return RnnAct{"Softplus", {}, {}};
      case Act::kElu:
        return RnnAct{"Elu", a.alpha, {}};
      default:
        return std::nullopt;
    }
  }

  // Keras's gate blocks [in, G*u] (columns per gate, in Keras's order) as ONNX's [1, G*u, in]
  // with the gates in ONNX's `order` (indices of Keras's blocks).
  static Tensor Gates(const Tensor& k, int64_t u, const std::vector<int>& order) {
    const int64_t rows = k.dim(0), g = static_cast<int64_t>(order.size());
    Tensor out({1, g * u, rows});
    for (int64_t gi = 0; gi < g; ++gi) {
      const int64_t kb = order[static_cast<size_t>(gi)];
      for (int64_t j = 0; j < u; ++j) {
        for (int64_t r = 0; r < rows; ++r) {
          out[(gi * u + j) * rows + r] = k[r * g * u + kb * u + j];
        }
      }
    }
    return out;
  }
  static std::vector<float> GateBias(const float* b, int64_t u, const std::vector<int>& order) {
    std::vector<float> out;
    for (int kb : order) out.insert(out.end(), b + kb * u, b + (kb + 1) * u);
    return out;
  }

  // One SimpleRNN, LSTM or GRU over x [batch, time, in] (its initial states after): outputs the
  // sequence or the last output, then with return_state the final states.
  absl::StatusOr<std::vector<std::string>> Rnn(const Layer& l, const Weights& w,
                                               const std::vector<std::string>& in) {
    const graph::RnnOptions o = *OptionsOf<graph::RnnOptions>(l);
    const std::string& cls = l.class_name();
    const bool lstm = cls == "LSTM", gru = cls == "GRU";
    const int64_t u = o.units;
    // ONNX's gate orders: LSTM i o f c (Keras i f c o), GRU z r h (Keras's too).
    const std::vector<int> order = lstm  ? std::vector<int>{0, 3, 1, 2}
                                   : gru ? std::vector<int>{0, 1, 2}
                                         : std::vector<int>{0};
    std::vector<RnnAct> acts;
    auto add = [&](const Activation& a) -> absl::Status {
      std::optional<RnnAct> r = RecurrentActivation(a);
      if (!r) return Refuse(l, "activation " + graph::ActivationName(a) + " in a recurrent op");
      acts.push_back(*r);
      return absl::OkStatus();
    };
    if (lstm || gru) {
      if (absl::Status s = add(o.recurrent_activation); !s.ok()) return s;
    }
    if (absl::Status s = add(o.activation); !s.ok()) return s;
    if (lstm) {
      if (absl::Status s = add(o.activation); !s.ok()) return s;
    }
    std::vector<std::string> names;
    std::vector<float> alphas, betas;
    for (const RnnAct& a : acts) {
      names.push_back(a.name);
      if (a.alpha) alphas.push_back(*a.alpha);
      if (a.beta) betas.push_back(*a.beta);
    }
    const Tensor& kernel = *w.Get("kernel");
    const Tensor& rec = *w.Get("recurrent_kernel");
    const int64_t g = static_cast<int64_t>(order.size());
    std::vector<float> wb(static_cast<size_t>(g * u), 0), rb(static_cast<size_t>(g * u), 0);
    if (o.use_bias) {
      const Tensor& b = *w.Get("bias");
      if (gru && b.rank() == 2) {  // reset_after: input and recurrent biases
        wb = GateBias(b.data(), u, order);
        rb = GateBias(b.data() + g * u, u, order);
      } else {
        wb = GateBias(b.data(), u, order);
      }
    }
    std::vector<float> bias = wb;
    bias.insert(bias.end(), rb.begin(), rb.end());
    // [time, batch, in], reversed in time for go_backwards: its outputs come in the order it
    // reads the steps, as Keras's do.
    std::string x = Op("Transpose", {in[0]}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
    if (o.go_backwards) x = Op("Slice", {x, Ints({-1}), Ints({kMin}), Ints({0}), Ints({-1})});
    std::vector<std::string> ins{x, Const("W", Gates(kernel, u, order)),
                                 Const("R", Gates(rec, u, order)), Const("B", {1, 2 * g * u}, bias),
                                 ""};
    for (size_t k = 1; k < in.size(); ++k) ins.push_back(Op("Unsqueeze", {in[k], Ints({0})}));
    std::vector<Attr> attrs{{"hidden_size", u}, {"activations", names}};
    if (!alphas.empty()) attrs.push_back({"activation_alpha", alphas});
    if (!betas.empty()) attrs.push_back({"activation_beta", betas});
    if (gru) attrs.push_back({"linear_before_reset", int64_t{o.reset_after ? 1 : 0}});
    const std::vector<std::string> outs = OpN(lstm  ? "LSTM"
                                              : gru ? "GRU"
                                                    : "RNN",
                                              ins, lstm ? 3 : 2, attrs);
    std::vector<std::string> result;
    if (o.return_sequences) {
      const std::string y = Op("Squeeze", {outs[0], Ints({1})});  // [time, batch, u]
      result.push_back(Op("Transpose", {y}, {{"perm", std::vector<int64_t>{1, 0, 2}}}));
    } else {
      result.push_back(Op("Squeeze", {outs[1], Ints({0})}));
    }
    if (o.return_state) {
      result.push_back(Op("Squeeze", {outs[1], Ints({0})}));
      if (lstm) result.push_back(Op("Squeeze", {outs[2], Ints({0})}));
    }
    return result;
  }

  absl::StatusOr<std::vector<std::string>> Bidirectional(const Layer& l,
                                                         const graph::BidirectionalOptions& b,
                                                         const std::vector<std::string>& in) {
    const size_t states = (in.size() - 1) / 2;
    std::vector<std::string> fin{in[0]}, bin{in[0]};
    for (size_t k = 0; k < states; ++k) {
      fin.push_back(in[1 + k]);
      bin.push_back(in[1 + states + k]);
    }
    absl::StatusOr<std::vector<std::string>> f =
        Rnn(*b.forward, Weights{&l, b.forward->name() + "/"}, fin);
    if (!f.ok()) return f.status();
    absl::StatusOr<std::vector<std::string>> r =
        Rnn(*b.backward, Weights{&l, b.backward->name() + "/"}, bin);
    if (!r.ok()) return r.status();
    std::string fy = (*f)[0], by = (*r)[0];
    if (b.return_sequences) {  // the backward sequence back in time order
      by = Op("Slice", {by, Ints({-1}), Ints({kMin}), Ints({1}), Ints({-1})});
    }
    std::vector<std::string> out;
    switch (b.merge) {
      case graph::BidirectionalMerge::kConcat:
        out.push_back(Op("Concat", {fy, by}, {{"axis", int64_t{-1}}}));
        break;
      case graph::BidirectionalMerge::kSum:
        out.push_back(Op("Add", {fy, by}));
        break;
      case graph::BidirectionalMerge::kMul:
        out.push_back(Op("Mul", {fy, by}));
        break;
      case graph::BidirectionalMerge::kAve:
        out.push_back(Op("Mul", {Op("Add", {fy, by}), Scalar(0.5f)}));
        break;
      case graph::BidirectionalMerge::kNone:
        out.push_back(fy);
        out.push_back(by);
        break;
    }
    if (b.return_state) {
      out.insert(out.end(), f->begin() + 1, f->end());
      out.insert(out.end(), r->begin() + 1, r->end());
    }
    return out;
  }

  // ---- Attention and wrappers -------------------------------------------------------------

  // x [batch, ..., d] flattened to [batch, seq, d] (the axes between known), or as is.
  absl::StatusOr<std::string> Sequence(const Layer& l, const std::string& x, const Shape& s) {
    if (s.size() == 2) return x;
    int64_t n = 1;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      if (s[i] < 0) return Refuse(l, "attention over several axes of open length");
      n *= s[i];
    }
    return Op("Reshape", {x, Ints({0, n, s.back()})});
  }

  // [batch, seq, d] projected by a kernel [d, heads, dim] (+ bias [heads, dim]) into
  // [batch, heads, seq, dim].
  std::string Project(const std::string& x, const Tensor& kernel, const Tensor* bias) {
    const int64_t d = kernel.dim(0), h = kernel.dim(1), k = kernel.dim(2);
    std::string y = Op("MatMul", {x, Const("kernel", {d, h * k}, kernel.values())});
    if (bias != nullptr) y = Op("Add", {y, Const("bias", {h * k}, bias->values())});
    y = Op("Reshape", {y, Ints({0, 0, h, k})});
    return Op("Transpose", {y}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  }

  absl::StatusOr<std::string> Attention(const Layer& l, const Weights& w,
                                        const std::vector<std::string>& in,
                                        const std::vector<int>& in_t,
                                        const graph::MultiHeadAttentionOptions& o) {
    const Shape& qs = ShapeOf(in_t[0]);
    const Shape& vs = ShapeOf(in_t[1]);
    const Shape& ks = ShapeOf(in_t.size() > 2 ? in_t[2] : in_t[1]);
    absl::StatusOr<std::string> q = Sequence(l, in[0], qs);
    absl::StatusOr<std::string> v = Sequence(l, in[1], vs);
    absl::StatusOr<std::string> k = Sequence(l, in.size() > 2 ? in[2] : in[1], ks);
    if (!q.ok()) return q;
    if (!v.ok()) return v;
    if (!k.ok()) return k;
    const bool bias = o.use_bias;
    const std::string Q = Project(*q, *w.Get("query/kernel"), bias ? w.Get("query/bias") : nullptr);
    const std::string K = Project(*k, *w.Get("key/kernel"), bias ? w.Get("key/bias") : nullptr);
    const std::string V = Project(*v, *w.Get("value/kernel"), bias ? w.Get("value/bias") : nullptr);
    const float scale = 1.0f / std::sqrt(static_cast<float>(o.key_dim));
    const std::string Kt =
        Op("Transpose", {K}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});  // [b, h, dim, s]
    std::string scores = Op("MatMul", {Op("Mul", {Q, Scalar(scale)}), Kt});  // [b, h, t, s]
    if (o.use_causal_mask) {
      // -1e9 where key s > query t, as the layer's mask gives: a lower triangle of ones.
      const std::string shape = Op("Shape", {scores}, {{"start", int64_t{2}}});
      const std::string tri =
          Op("Trilu", {Op("Expand", {Scalar(1), shape})}, {{"upper", int64_t{0}}});
      const std::string penalty = Op("Mul", {Op("Sub", {Scalar(1), tri}), Scalar(-1e9f)});
      scores = Op("Add", {scores, penalty});
    }
    const std::string p = Op("Softmax", {scores}, {{"axis", int64_t{-1}}});
    std::string y = Op("MatMul", {p, V});  // [b, h, t, vdim]
    y = Op("Transpose", {y}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
    const Tensor& ok = *w.Get("attention_output/kernel");  // [h, vdim, d]
    const int64_t h = ok.dim(0), vd = ok.dim(1), d = ok.dim(2);
    y = Op("Reshape", {y, Ints({0, 0, h * vd})});
    y = Op("MatMul", {y, Const("kernel", {h * vd, d}, ok.values())});
    if (bias) y = Op("Add", {y, Const("bias", *w.Get("attention_output/bias"))});
    if (qs.size() > 2) {
      std::vector<int64_t> back{0};
      for (size_t i = 0; i + 1 < qs.size(); ++i) back.push_back(qs[i]);
      back.push_back(d);
      y = Op("Reshape", {y, Ints(back)});
    }
    return y;
  }

  absl::StatusOr<std::vector<std::string>> TimeDistributed(const Layer& l,
                                                           const graph::TimeDistributedOptions& t,
                                                           const std::vector<std::string>& in,
                                                           const std::vector<int>& in_t,
                                                           const std::vector<int>& out_t) {
    const Shape& s = ShapeOf(in_t[0]);  // [time, rest...]
    const Shape& os = ShapeOf(out_t[0]);
    std::vector<int64_t> flat{-1};
    for (size_t i = 1; i < s.size(); ++i) {
      if (s[i] < 0) return Refuse(l, "steps of open shape");
      flat.push_back(s[i]);
    }
    for (size_t i = 1; i < os.size(); ++i) {
      if (os[i] < 0) return Refuse(l, "outputs of open shape");
    }
    // The inner layer sees [batch * time, rest...]; its shapes are the step's.
    const std::string x = Op("Reshape", {in[0], Ints(flat)});
    absl::StatusOr<std::vector<std::string>> y =
        InnerStep(*t.inner, Weights{&l, ""}, x, Shape(s.begin() + 1, s.end()),
                  Shape(os.begin() + 1, os.end()));
    if (!y.ok()) return y.status();
    const std::string bt = Op("Slice", {Op("Shape", {in[0]}), Ints({0}), Ints({2})});
    const std::string target =
        Op("Concat", {bt, Ints(std::vector<int64_t>(os.begin() + 1, os.end()))},
           {{"axis", int64_t{0}}});
    return std::vector<std::string>{Op("Reshape", {(*y)[0], target})};
  }

  // A TimeDistributed's inner layer on one step's shapes: exported through a scratch tensor
  // numbering so its shape lookups see the step's shapes.
  absl::StatusOr<std::vector<std::string>> InnerStep(const Layer& inner, const Weights& w,
                                                     const std::string& x, const Shape& in,
                                                     const Shape& out) {
    step_shapes_ = {in, out};
    absl::StatusOr<std::vector<std::string>> y = Export(inner, w, {x}, {-1}, {-2});
    step_shapes_.clear();
    return y;
  }

  // ---- State -------------------------------------------------------------------------------

  graph::Graph& g_;
  onnx::GraphProto* graph_ = nullptr;
  std::vector<std::string> values_;
  std::vector<Shape> step_shapes_;
  int counter_ = 0;
};

}  // namespace

absl::Status WriteOnnx(graph::Graph& g, const std::string& name, const std::string& path) {
  onnx::ModelProto model;
  Exporter e(g);
  if (absl::Status s = e.Build(name, &model); !s.ok()) return s;
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return absl::InternalError("cannot serialise the ONNX model");
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::InternalError("cannot write " + path);
  return absl::OkStatus();
}

}  // namespace lockstep::trainer
