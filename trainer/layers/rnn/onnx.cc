// The ONNX exporters of the rnn family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/rnn/rnn.h"

namespace lockstep::trainer::layers::rnn {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

// ONNX's name and alpha/beta for a recurrent activation (nullopt: none).
struct RnnAct {
  std::string name;
  std::optional<float> alpha, beta;
};

std::optional<RnnAct> RecurrentActivation(const Activation& a) {
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
Tensor Gates(const Tensor& k, int64_t u, const std::vector<int>& order) {
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

std::vector<float> GateBias(const float* b, int64_t u, const std::vector<int>& order) {
  std::vector<float> out;
  for (int kb : order) out.insert(out.end(), b + kb * u, b + (kb + 1) * u);
  return out;
}

// One SimpleRNN, LSTM or GRU over x [batch, time, in] (its initial states after): outputs the
// sequence or the last output, then with return_state the final states.
absl::StatusOr<std::vector<std::string>> Rnn(OnnxBuilder& ox, const Layer& l, const OnnxWeights& w,
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
    if (!r) return OnnxRefusal(l, "activation " + graph::ActivationName(a) + " in a recurrent op");
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
  std::string x = ox.Op("Transpose", {in[0]}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
  if (o.go_backwards)
    x = ox.Op("Slice", {x, ox.Ints({-1}), ox.Ints({kOnnxIndexMin}), ox.Ints({0}), ox.Ints({-1})});
  std::vector<std::string> ins{x, ox.Const("W", Gates(kernel, u, order)),
                               ox.Const("R", Gates(rec, u, order)),
                               ox.Const("B", {1, 2 * g * u}, bias), ""};
  for (size_t k = 1; k < in.size(); ++k) ins.push_back(ox.Op("Unsqueeze", {in[k], ox.Ints({0})}));
  std::vector<OnnxAttr> attrs{{"hidden_size", u}, {"activations", names}};
  if (!alphas.empty()) attrs.push_back({"activation_alpha", alphas});
  if (!betas.empty()) attrs.push_back({"activation_beta", betas});
  if (gru) attrs.push_back({"linear_before_reset", int64_t{o.reset_after ? 1 : 0}});
  const std::vector<std::string> outs = ox.OpN(lstm  ? "LSTM"
                                               : gru ? "GRU"
                                                     : "RNN",
                                               ins, lstm ? 3 : 2, attrs);
  std::vector<std::string> result;
  if (o.return_sequences) {
    const std::string y = ox.Op("Squeeze", {outs[0], ox.Ints({1})});  // [time, batch, u]
    result.push_back(ox.Op("Transpose", {y}, {{"perm", std::vector<int64_t>{1, 0, 2}}}));
  } else {
    result.push_back(ox.Op("Squeeze", {outs[1], ox.Ints({0})}));
  }
  if (o.return_state) {
    result.push_back(ox.Op("Squeeze", {outs[1], ox.Ints({0})}));
    if (lstm) result.push_back(ox.Op("Squeeze", {outs[2], ox.Ints({0})}));
  }
  return result;
}

absl::StatusOr<std::vector<std::string>> Bidirectional(OnnxBuilder& ox, const Layer& l,
                                                       const graph::BidirectionalOptions& b,
                                                       const std::vector<std::string>& in) {
  const size_t states = (in.size() - 1) / 2;
  std::vector<std::string> fin{in[0]}, bin{in[0]};
  for (size_t k = 0; k < states; ++k) {
    fin.push_back(in[1 + k]);
    bin.push_back(in[1 + states + k]);
  }
  absl::StatusOr<std::vector<std::string>> f =
      Rnn(ox, *b.forward, OnnxWeights{&l, b.forward->name() + "/"}, fin);
  if (!f.ok()) return f.status();
  absl::StatusOr<std::vector<std::string>> r =
      Rnn(ox, *b.backward, OnnxWeights{&l, b.backward->name() + "/"}, bin);
  if (!r.ok()) return r.status();
  std::string fy = (*f)[0], by = (*r)[0];
  if (b.return_sequences) {  // the backward sequence back in time order
    by = ox.Op("Slice", {by, ox.Ints({-1}), ox.Ints({kOnnxIndexMin}), ox.Ints({1}), ox.Ints({-1})});
  }
  std::vector<std::string> out;
  switch (b.merge) {
    case graph::BidirectionalMerge::kConcat:
      out.push_back(ox.Op("Concat", {fy, by}, {{"axis", int64_t{-1}}}));
      break;
    case graph::BidirectionalMerge::kSum:
      out.push_back(ox.Op("Add", {fy, by}));
      break;
    case graph::BidirectionalMerge::kMul:
      out.push_back(ox.Op("Mul", {fy, by}));
      break;
    case graph::BidirectionalMerge::kAve:
      out.push_back(ox.Op("Mul", {ox.Op("Add", {fy, by}), ox.Scalar(0.5f)}));
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

absl::StatusOr<std::vector<std::string>> TimeDistributed(OnnxBuilder& ox, const Layer& l,
                                                         const graph::TimeDistributedOptions& t,
                                                         const std::vector<std::string>& in,
                                                         const std::vector<int>& in_t,
                                                         const std::vector<int>& out_t) {
  const Shape& s = ox.ShapeOf(in_t[0]);  // [time, rest...]
  const Shape& os = ox.ShapeOf(out_t[0]);
  std::vector<int64_t> flat{-1};
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] < 0) return OnnxRefusal(l, "steps of open shape");
    flat.push_back(s[i]);
  }
  for (size_t i = 1; i < os.size(); ++i) {
    if (os[i] < 0) return OnnxRefusal(l, "outputs of open shape");
  }
  // The inner layer sees [batch * time, rest...]; its shapes are the step's.
  const std::string x = ox.Op("Reshape", {in[0], ox.Ints(flat)});
  absl::StatusOr<std::vector<std::string>> y =
      ox.InnerStep(*t.inner, OnnxWeights{&l, ""}, x, Shape(s.begin() + 1, s.end()),
                   Shape(os.begin() + 1, os.end()));
  if (!y.ok()) return y.status();
  const std::string bt = ox.Op("Slice", {ox.Op("Shape", {in[0]}), ox.Ints({0}), ox.Ints({2})});
  const std::string target =
      ox.Op("Concat", {bt, ox.Ints(std::vector<int64_t>(os.begin() + 1, os.end()))},
            {{"axis", int64_t{0}}});
  return std::vector<std::string>{ox.Op("Reshape", {(*y)[0], target})};
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::RnnOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Rnn(ox, a.layer, a.weights, a.in);
  });
  r.Onnx<graph::BidirectionalOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Bidirectional(ox, a.layer, *OptionsOf<graph::BidirectionalOptions>(a.layer), a.in);
  });
  r.Onnx<graph::TimeDistributedOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return TimeDistributed(ox, a.layer, *OptionsOf<graph::TimeDistributedOptions>(a.layer), a.in,
                           a.in_t, a.out_t);
  });
}

}  // namespace lockstep::trainer::layers::rnn
