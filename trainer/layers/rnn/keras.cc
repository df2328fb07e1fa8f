// The recurrent layers' Keras factories: SimpleRNN, LSTM, GRU, the generic RNN around one of
// their cells, Bidirectional and TimeDistributed, from the configs Keras 2 (2.0 ... 2.15) and
// Keras 3 write.
#include <map>

#include "trainer/keras/layer_factory.h"
#include "trainer/keras/model_loader.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/rnn/rnn.h"

namespace lockstep::trainer::layers::rnn {
namespace {

using graph::Layer;
using keras::ClassOf;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using keras::Show;
using nlohmann::json;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

LayerOr Recurrent(LayerConfig& c, RnnCell cell) {
  graph::RnnOptions o;
  const bool gated = cell != RnnCell::kSimpleRnn;
  if (!c.Has("units")) c.Error("option units is required");
  o.units = c.Int("units", 1);
  if (o.units <= 0) c.Error("option units must be positive");
  o.activation = c.Activation("activation", "tanh");
  if (gated) {
    // Keras 2.0-2.2 defaulted to hard_sigmoid and every Keras 2 config states it.
    o.recurrent_activation =
        c.Activation("recurrent_activation", c.keras3() ? "sigmoid" : "hard_sigmoid");
  }
  o.use_bias = c.Bool("use_bias", true);
  o.kernel_initializer = c.Initializer("kernel_initializer", graph::GlorotUniform());
  o.recurrent_initializer = c.Initializer("recurrent_initializer", graph::Orthogonal());
  o.bias_initializer = c.Initializer("bias_initializer", graph::Zeros());
  if (cell == RnnCell::kLstm) o.unit_forget_bias = c.Bool("unit_forget_bias", true);
  const Regularizer kr = c.Regularization("kernel_regularizer");
  const Regularizer rr = c.Regularization("recurrent_regularizer");
  const Regularizer br = c.Regularization("bias_regularizer");
  o.kernel_l1 = kr.l1;
  o.kernel_l2 = kr.l2;
  o.recurrent_l1 = rr.l1;
  o.recurrent_l2 = rr.l2;
  o.bias_l1 = br.l1;
  o.bias_l2 = br.l2;
  c.ExpectNull({"kernel_constraint", "recurrent_constraint", "bias_constraint"});
  o.dropout = c.Float("dropout", 0);
  if (o.dropout < 0 || o.dropout > 1) c.Error("option dropout must be in [0, 1]");
  o.recurrent_dropout = c.Float("recurrent_dropout", 0);
  if (o.recurrent_dropout < 0 || o.recurrent_dropout > 1) {
    c.Error("option recurrent_dropout must be in [0, 1]");
  }
  const bool rdrop = o.recurrent_dropout > 0 && o.recurrent_dropout < 1;
  // Implementation 0 and 1 draw a dropout mask per gate, 2 one for all; otherwise the
  // arithmetic is the same. Keras 3 does not write it and switches to 1 under recurrent
  // dropout, as tf.keras does (and then writes 1).
  const int64_t implementation = c.Int("implementation", 2);
  const bool per_gate = gated && (implementation < 2 || (c.keras3() && rdrop));
  o.dropout_per_gate = per_gate;
  o.recurrent_dropout_per_gate = per_gate;
  if (cell == RnnCell::kGru && rdrop && !per_gate) {
    // Keras 2.1-2.2's GRU with implementation 2 dropped out the state it carries too.
    c.Refuse("option recurrent_dropout=" + Show(c.raw()["recurrent_dropout"]) +
             " with implementation=2");
  }
  o.return_sequences = c.Bool("return_sequences", false);
  o.return_state = c.Bool("return_state", false);
  o.go_backwards = c.Bool("go_backwards", false);
  c.Expect("stateful", false);
  c.Ignore("unroll");     // a loop either way
  c.Ignore("use_cudnn");  // Keras 3: which kernel computes the same thing
  c.Expect("time_major", false);
  o.zero_output_for_mask = c.Bool("zero_output_for_mask", false);
  c.Ignore("seed");  // the trainer's seed drives the dropout masks
  if (cell == RnnCell::kGru) {
    // Keras 2 before reset_after existed computed it "before"; Keras 3 defaults to after.
    o.reset_after = c.Bool("reset_after", c.keras3());
  }
  return graph::MakeRnn(c.name(), cell, o);
}

// Keras's generic RNN layer around one built-in cell: the LSTM, GRU or SimpleRNN layer with the
// cell's options and the RNN's sequence options, read (and checked) together.
LayerOr GenericRnn(LayerConfig& c, const LayerFactories&) {
  const json cell = c.Object("cell");
  if (cell.is_array() || ClassOf(cell) == "StackedRNNCells") {
    return c.Prefix("a stack of cells (StackedRNNCells) is not supported; stack RNN layers");
  }
  if (!cell.is_object()) return c.Prefix("option cell is required");
  static const std::map<std::string, RnnCell> kCells = {{"LSTMCell", RnnCell::kLstm},
                                                        {"GRUCell", RnnCell::kGru},
                                                        {"SimpleRNNCell", RnnCell::kSimpleRnn}};
  const std::string cls = ClassOf(cell);
  auto it = kCells.find(cls);
  if (it == kCells.end()) {
    return c.Prefix("cell class '" + cls +
                    "' is not supported (LSTMCell, GRUCell and SimpleRNNCell are)");
  }
  json merged =
      cell.contains("config") && cell["config"].is_object() ? cell["config"] : json::object();
  for (const char* k : {"return_sequences", "return_state", "go_backwards", "stateful", "unroll",
                        "time_major", "zero_output_for_mask"}) {
    if (!c.Has(k)) continue;
    merged[k] = c.raw()[k];
    c.Ignore(k);  // read below, with the cell's options
  }
  LayerConfig inner(merged, c.name(), c.class_name(), c.keras3());
  ReadCommonOptions(inner);
  LayerOr l = Recurrent(inner, it->second);
  if (!l.ok()) return l;
  if (absl::Status s = inner.Finish(); !s.ok()) return s;
  return l;
}

bool Flag(const json& cfg, const char* key) {
  return cfg.contains(key) && cfg[key].is_boolean() && cfg[key].get<bool>();
}

std::string WithPrefix(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix, 0) == 0 ? name : prefix + name;
}

LayerOr Bidirectional(LayerConfig& c, const LayerFactories& all) {
  json layer = c.Object("layer");
  json backward = c.Object("backward_layer");
  // merge_mode null returns both directions.
  const bool none = c.raw().contains("merge_mode") && c.raw()["merge_mode"].is_null();
  const std::string mode = c.String("merge_mode", "concat");
  graph::BidirectionalMerge merge = graph::BidirectionalMerge::kConcat;
  if (none) {
    merge = graph::BidirectionalMerge::kNone;
  } else if (mode == "sum") {
    merge = graph::BidirectionalMerge::kSum;
  } else if (mode == "mul") {
    merge = graph::BidirectionalMerge::kMul;
  } else if (mode == "ave") {
    merge = graph::BidirectionalMerge::kAve;
  } else if (mode != "concat") {
    c.Error("option merge_mode=\"" + mode + "\" is not one of concat, sum, mul, ave, null");
  }
  const auto supported = [](const std::string& cls) {
    return cls == "LSTM" || cls == "GRU" || cls == "SimpleRNN";
  };
  const std::string cls = ClassOf(layer);
  if (!supported(cls)) {
    return c.Prefix("a Bidirectional wrapper over " + (cls.empty() ? "no layer" : cls) +
                    " is not supported (it wraps LSTM, GRU and SimpleRNN)");
  }
  if (!layer.contains("config") || !layer["config"].is_object()) layer["config"] = json::object();
  json& cfg = layer["config"];
  const bool seq = Flag(cfg, "return_sequences");
  const bool state = Flag(cfg, "return_state");
  const std::string inner = cfg.contains("name") && cfg["name"].is_string()
                                ? cfg["name"].get<std::string>()
                                : std::string(cls == "SimpleRNN" ? "simple_rnn"
                                              : cls == "LSTM"    ? "lstm"
                                                                 : "gru");
  const auto strip = [](const std::string& n, const std::string& p) {
    return n.rfind(p, 0) == 0 ? n.substr(p.size()) : n;
  };
  // Keras recreates both directions from the config; with return_sequences the masked steps
  // of both are zero (Keras forces zero_output_for_mask).
  json fwd = layer;
  fwd["config"]["name"] = "forward_" + strip(inner, "forward_");
  fwd["config"]["zero_output_for_mask"] = seq;
  json bwd;
  if (backward.is_null()) {
    bwd = layer;
    bwd["config"]["name"] = "backward_" + strip(inner, "backward_");
    bwd["config"]["go_backwards"] = !Flag(cfg, "go_backwards");
  } else {
    if (!supported(ClassOf(backward))) {
      return c.Prefix("a backward_layer of class " + ClassOf(backward) + " is not supported");
    }
    bwd = backward;
    if (!bwd.contains("config") || !bwd["config"].is_object()) bwd["config"] = json::object();
    const json& bc = bwd["config"];
    if (Flag(bc, "go_backwards") == Flag(cfg, "go_backwards")) {
      return c.Prefix("its forward and backward layers have the same go_backwards");
    }
    if (Flag(bc, "return_sequences") != seq || Flag(bc, "return_state") != state ||
        Flag(bc, "stateful") != Flag(cfg, "stateful")) {
      return c.Prefix(
          "its forward and backward layers differ in return_sequences, return_state or stateful");
    }
    const std::string bn = bc.contains("name") && bc["name"].is_string()
                               ? bc["name"].get<std::string>()
                               : "backward_" + inner;
    bwd["config"]["name"] = WithPrefix(bn, "backward_");
  }
  bwd["config"]["zero_output_for_mask"] = seq;
  absl::StatusOr<std::unique_ptr<Layer>> f = all.Build(fwd, c.keras3());
  if (!f.ok()) return f.status();
  absl::StatusOr<std::unique_ptr<Layer>> b = all.Build(bwd, c.keras3());
  if (!b.ok()) return b.status();
  return graph::MakeBidirectional(c.name(), std::move(*f), std::move(*b), merge, seq, state);
}

LayerOr TimeDistributed(LayerConfig& c, const LayerFactories& all) {
  const json layer = c.Object("layer");
  if (!layer.is_object()) return c.Prefix("option layer is required");
  absl::StatusOr<std::unique_ptr<Layer>> inner = all.Build(layer, c.keras3());
  if (!inner.ok()) return inner.status();
  return graph::MakeTimeDistributed(c.name(), std::move(*inner));
}

}  // namespace

void RegisterKeras(Registry& r) {
  r.keras().Add("SimpleRNN", [](LayerConfig& c, const LayerFactories&) {
    return Recurrent(c, RnnCell::kSimpleRnn);
  });
  r.keras().Add("LSTM",
                [](LayerConfig& c, const LayerFactories&) { return Recurrent(c, RnnCell::kLstm); });
  r.keras().Add("GRU",
                [](LayerConfig& c, const LayerFactories&) { return Recurrent(c, RnnCell::kGru); });
  r.keras().Add("RNN", GenericRnn);
  r.keras().Add("Bidirectional", Bidirectional);
  r.keras().Add("TimeDistributed", TimeDistributed);
}

}  // namespace lockstep::trainer::layers::rnn
