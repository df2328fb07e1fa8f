#include "trainer/keras/model_loader.h"

#include <map>
#include <optional>
#include <random>
#include <tuple>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/attention/attention.h"
#include "trainer/layers/masking/masking.h"

namespace lockstep::trainer::keras {
namespace {

using graph::Graph;
using graph::Layer;
using nlohmann::json;

}  // namespace

bool IsModelClass(const std::string& c) {
  return c == "Sequential" || c == "Functional" || c == "Model";
}

std::string ClassOf(const json& entry) {
  return entry.is_object() && entry.contains("class_name") && entry["class_name"].is_string()
             ? entry["class_name"].get<std::string>()
             : "";
}

std::string NameOf(const json& entry) {
  if (entry.contains("config") && entry["config"].is_object() && entry["config"].contains("name") &&
      entry["config"]["name"].is_string()) {
    return entry["config"]["name"].get<std::string>();
  }
  if (entry.contains("name") && entry["name"].is_string()) return entry["name"].get<std::string>();
  return ClassOf(entry);
}

namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError("model config: " + what);
}

// The per-example shape an InputLayer or a first layer declares (batch dropped; null -> -1).
std::optional<Shape> DeclaredShape(const json& config) {
  for (const char* key : {"batch_input_shape", "batch_shape"}) {
    if (config.contains(key) && config[key].is_array() && !config[key].empty()) {
      Shape s;
      for (size_t i = 1; i < config[key].size(); ++i) {
        const json& d = config[key][i];
        s.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
      }
      return s;
    }
  }
  return std::nullopt;
}

// A tensor reference: output `tensor` of call `node` of layer `layer`.
using Ref = std::tuple<std::string, int64_t, int64_t>;

std::optional<Ref> AsRef(const json& v) {
  if (v.is_object() && ClassOf(v) == "__keras_tensor__" && v.contains("config") &&
      v["config"].contains("keras_history")) {
    const json& h = v["config"]["keras_history"];
    if (h.is_array() && h.size() == 3 && h[0].is_string()) {
      return Ref{h[0].get<std::string>(), h[1].get<int64_t>(), h[2].get<int64_t>()};
    }
  }
  if (v.is_array() && v.size() >= 3 && v[0].is_string() && v[1].is_number_integer() &&
      v[2].is_number_integer()) {
    return Ref{v[0].get<std::string>(), v[1].get<int64_t>(), v[2].get<int64_t>()};
  }
  return std::nullopt;
}

// One call of a layer, as a node of a functional config records it.
struct CallSpec {
  std::vector<Ref> inputs;
  std::vector<json> constants;  // non-tensor positional arguments (Keras 3 ops)
  std::map<std::string, json> kwargs;
};

absl::StatusOr<CallSpec> ParseNode(const json& node) {
  CallSpec c;
  if (node.is_object() && node.contains("args")) {  // Keras 3
    for (const json& a : node["args"]) {
      if (auto r = AsRef(a)) {
        c.inputs.push_back(*r);
      } else if (a.is_array()) {
        for (const json& e : a) {
          auto r2 = AsRef(e);
          if (!r2) return Bad("a call argument list holds a non-tensor: " + Show(e));
          c.inputs.push_back(*r2);
        }
      } else {
        c.constants.push_back(a);
      }
    }
    if (node.contains("kwargs") && node["kwargs"].is_object()) {
      for (auto it = node["kwargs"].begin(); it != node["kwargs"].end(); ++it) {
        c.kwargs[it.key()] = it.value();
      }
    }
    return c;
  }
  if (!node.is_array()) return Bad("an inbound node is neither a list nor {args, kwargs}");
  for (const json& t : node) {  // Keras 2: [[layer, node, tensor, kwargs], ...]
    auto r = AsRef(t);
    if (!r) return Bad("an inbound tensor is not [layer, node, tensor]: " + Show(t));
    c.inputs.push_back(*r);
    if (t.size() > 3 && t[3].is_object()) {
      for (auto it = t[3].begin(); it != t[3].end(); ++it) c.kwargs[it.key()] = it.value();
    }
  }
  return c;
}

// Refs inside a kwarg value (a tensor, or a list of them).
std::vector<Ref> RefsIn(const json& v) {
  std::vector<Ref> out;
  if (auto r = AsRef(v)) {
    out.push_back(*r);
  } else if (v.is_array()) {
    for (const json& e : v) {
      if (auto r2 = AsRef(e)) out.push_back(*r2);
    }
  }
  return out;
}

bool IsFalsy(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_array() && v.empty());
}

}  // namespace

const json& LayersOf(const json& model) {
  static const json kNone = json::array();
  if (!model.contains("config")) return kNone;
  const json& c = model["config"];
  if (c.is_array()) return c;
  if (c.is_object() && c.contains("layers") && c["layers"].is_array()) return c["layers"];
  return kNone;
}

bool IsOpClass(const std::string& c) {
  return c == "Equal" || c == "NotEqual" || c == "Greater" || c == "GreaterEqual" || c == "Less" ||
         c == "LessEqual";
}

namespace {

// Before any wiring: the first layer, in file order and inside nested models, whose class the
// engine cannot build (Python code, a user-defined class, an unknown class), so the refusal
// names it rather than a structural symptom.
absl::Status CheckClasses(const json& model, bool keras3) {
  for (const json& e : LayersOf(model)) {
    const std::string c = ClassOf(e);
    if (IsModelClass(c)) {
      if (absl::Status s = CheckClasses(e, keras3); !s.ok()) return s;
    } else if (c != "InputLayer" && !IsOpClass(c) && LayerFactories::Get().Find(c) == nullptr) {
      return LayerFactories::Get().Build(e, keras3).status();
    }
  }
  return absl::OkStatus();
}

// The per-example input shape a model declares (a nested model's, for a Sequential model whose
// first layer is a model).
std::optional<Shape> ModelInputShape(const json& model) {
  const json& layers = LayersOf(model);
  if (layers.empty()) return std::nullopt;
  const json& first = layers[0];
  if (IsModelClass(ClassOf(first))) return ModelInputShape(first);
  if (first.contains("config") && first["config"].is_object())
    return DeclaredShape(first["config"]);
  return std::nullopt;
}

class Builder {
 public:
  Builder(Graph* g, bool keras3, uint64_t seed, int64_t open_axis_size = 0)
      : g_(g), keras3_(keras3), rng_(seed), open_axis_size_(open_axis_size) {
    ctx_.rng = &rng_;
  }

  // Builds a model entry called on `inputs` (null: the top-level model, which makes the graph's
  // inputs). Returns its output tensors.
  absl::StatusOr<std::vector<int>> Model(const json& m, const std::vector<int>* inputs) {
    // By reference: layers are keyed by their entry's address, which makes a nested model
    // called twice share its layers.
    static const json kNone;
    const json& config = m.contains("config") ? m["config"] : kNone;
    if (ClassOf(m) == "Sequential") {
      if (config.is_array()) return Sequential(config, NameOf(m), inputs);
      if (config.is_object() && config.contains("layers") && config["layers"].is_array()) {
        return Sequential(config["layers"], NameOf(m), inputs);
      }
      return Bad("Sequential model '" + NameOf(m) + "' has no layers list");
    }
    if (!config.is_object() || !config.contains("layers") || !config["layers"].is_array()) {
      return Bad("model '" + NameOf(m) + "' has no layers list");
    }
    return Functional(config, inputs);
  }

  std::vector<std::string> output_names;
  const std::map<const json*, Layer*>& layers() const { return layers_; }

 private:
  absl::StatusOr<Layer*> LayerFor(const json& entry) {
    auto it = layers_.find(&entry);
    if (it != layers_.end()) return it->second;
    absl::StatusOr<std::unique_ptr<Layer>> l = LayerFactories::Get().Build(entry, keras3_);
    if (!l.ok()) return l.status();
    Layer* p = g_->AddLayer(std::move(*l));
    layers_[&entry] = p;
    return p;
  }

  absl::StatusOr<std::vector<int>> Call(Layer* l, const std::vector<int>& in,
                                        std::optional<bool> training = std::nullopt) {
    return g_->Call(l, in, ctx_, training);
  }

  absl::StatusOr<std::vector<int>> Sequential(const json& layers, const std::string& name,
                                              const std::vector<int>* inputs) {
    std::vector<int> t;
    if (inputs != nullptr) {
      if (inputs->size() != 1)
        return Bad("Sequential model '" + name + "' called on several inputs");
      t = *inputs;
    }
    for (size_t i = 0; i < layers.size(); ++i) {
      const json& e = layers[i];
      const std::string cls = ClassOf(e);
      static const json kNone;
      const json& cfg = e.contains("config") ? e["config"] : kNone;
      if (t.empty()) {
        std::optional<Shape> s =
            Closed(IsModelClass(cls)                         ? ModelInputShape(e)
                   : cls == "InputLayer" || !cfg.is_object() ? std::nullopt
                                                             : DeclaredShape(cfg));
        if (cls == "InputLayer") {
          if (absl::StatusOr<int> in = Input(e); in.ok()) {
            t = {*in};
            continue;
          } else {
            return in.status();
          }
        }
        if (!s) {
          return Bad("Sequential model '" + name +
                     "' declares no input shape (give it an Input or its first layer an "
                     "input_shape before saving)");
        }
        t = {g_->AddInput(NameOf(e) + "_input", *s)};
      } else if (cls == "InputLayer") {
        continue;  // a nested Sequential's own input: the caller's tensor replaces it
      }
      absl::StatusOr<std::vector<int>> out = Apply(e, t);
      if (!out.ok()) return out.status();
      t = *out;
      if (inputs == nullptr) output_names = {NameOf(e)};
    }
    if (t.empty()) return Bad("Sequential model '" + name + "' has no layers");
    return t;
  }

  // A layer entry (or a nested model) called on tensors, without call arguments.
  absl::StatusOr<std::vector<int>> Apply(const json& e, const std::vector<int>& in) {
    if (IsModelClass(ClassOf(e))) return Model(e, &in);
    absl::StatusOr<Layer*> l = LayerFor(e);
    if (!l.ok()) return l.status();
    return Call(*l, in);
  }

  // A declared shape with its open axes (-1) given open_axis_size_ (when set).
  std::optional<Shape> Closed(std::optional<Shape> s) const {
    if (s && open_axis_size_ > 0) {
      for (int64_t& d : *s) {
        if (d < 0) d = open_axis_size_;
      }
    }
    return s;
  }

  absl::StatusOr<int> Input(const json& e) {
    LayerConfig c(e.value("config", json::object()), NameOf(e), "InputLayer", keras3_);
    const json& cfg = c.raw();
    std::optional<Shape> s = Closed(DeclaredShape(cfg));
    c.Ignore("batch_input_shape");
    c.Ignore("batch_shape");
    c.Ignore("name");
    // Integer inputs (token ids) arrive as floats; the layers that read ids check them.
    const std::string dtype = c.String("dtype", "float32");
    if (dtype != "float32" && dtype != "float16" && dtype != "bfloat16" && dtype != "float64" &&
        dtype.rfind("int", 0) != 0 && dtype.rfind("uint", 0) != 0) {
      c.Refuse("dtype \"" + dtype + "\"");
    }
    c.Expect("sparse", false);
    c.Expect("ragged", false);
    c.Expect("optional", false);
    c.Expect("input_tensor", nullptr);
    if (absl::Status st = c.Finish(); !st.ok()) return st;
    if (!s) return c.Prefix("declares no shape");
    return g_->AddInput(NameOf(e), *s);
  }

  static std::vector<Ref> RefList(const json& v) {
    std::vector<Ref> out;
    if (auto r = AsRef(v)) return {*r};
    if (v.is_array()) {
      for (const json& e : v) {
        if (auto r = AsRef(e)) out.push_back(*r);
      }
    }
    return out;
  }

  absl::StatusOr<std::vector<int>> Functional(const json& config, const std::vector<int>* inputs) {
    const json& layers = config["layers"];
    std::map<Ref, int> tensors;
    std::map<std::string, const json*> by_name;
    for (const json& e : layers) by_name[NameOf(e)] = &e;
    const std::vector<Ref> in_refs = RefList(config.value("input_layers", json::array()));
    const std::vector<Ref> out_refs = RefList(config.value("output_layers", json::array()));
    if (in_refs.empty() || out_refs.empty()) {
      return Bad("functional model '" + config.value("name", std::string("?")) +
                 "' lists no input_layers or output_layers");
    }
    if (inputs != nullptr && inputs->size() != in_refs.size()) {
      return Bad("model '" + config.value("name", std::string("?")) + "' takes " +
                 std::to_string(in_refs.size()) + " inputs, called on " +
                 std::to_string(inputs->size()));
    }
    for (size_t i = 0; i < in_refs.size(); ++i) {
      const std::string& n = std::get<0>(in_refs[i]);
      auto it = by_name.find(n);
      if (it == by_name.end() || ClassOf(*it->second) != "InputLayer") {
        return Bad("input layer '" + n + "' is not an InputLayer of the model");
      }
      if (inputs != nullptr) {
        tensors[{n, 0, 0}] = (*inputs)[i];
      } else {
        absl::StatusOr<int> t = Input(*it->second);
        if (!t.ok()) return t.status();
        tensors[{n, 0, 0}] = *t;
      }
    }
    // Every call of every layer, run once its inputs exist.
    struct Pending {
      const json* entry;
      size_t index;
      CallSpec spec;
    };
    std::vector<Pending> pending;
    for (const json& e : layers) {
      if (ClassOf(e) == "InputLayer") continue;
      const json nodes = e.value("inbound_nodes", json::array());
      for (size_t k = 0; k < nodes.size(); ++k) {
        absl::StatusOr<CallSpec> s = ParseNode(nodes[k]);
        if (!s.ok())
          return absl::InvalidArgumentError("layer '" + NameOf(e) +
                                            "': " + std::string(s.status().message()));
        pending.push_back({&e, k, std::move(*s)});
      }
    }
    auto lookup = [&](const Ref& r) -> std::optional<int> {
      auto it = tensors.find(r);
      if (it != tensors.end()) return it->second;
      // Keras 2 numbers a nested model's calls from 1 (its node 0 links its own input to
      // output); Keras 3 from 0. Accept either numbering.
      auto m = by_name.find(std::get<0>(r));
      if (m != by_name.end() && IsModelClass(ClassOf(*m->second))) {
        auto alt = tensors.find({std::get<0>(r), std::get<1>(r) - 1, std::get<2>(r)});
        if (alt != tensors.end()) return alt->second;
      }
      return std::nullopt;
    };
    while (!pending.empty()) {
      bool progress = false;
      for (size_t p = 0; p < pending.size();) {
        Pending& call = pending[p];
        std::vector<Ref> needed = call.spec.inputs;
        for (const auto& [k, v] : call.spec.kwargs) {
          for (const Ref& r : RefsIn(v)) needed.push_back(r);
        }
        bool ready = true;
        for (const Ref& r : needed) ready = ready && lookup(r).has_value();
        if (!ready) {
          ++p;
          continue;
        }
        absl::StatusOr<std::vector<int>> out = Node(*call.entry, call.spec, lookup);
        if (!out.ok()) return out.status();
        const std::string name = NameOf(*call.entry);
        const auto node = static_cast<int64_t>(call.index);
        for (size_t t = 0; t < out->size(); ++t) {
          tensors[{name, node, static_cast<int64_t>(t)}] = (*out)[t];
        }
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(p));
        progress = true;
      }
      if (!progress) {
        const Pending& stuck = pending.front();
        std::string missing;
        for (const Ref& r : stuck.spec.inputs) {
          if (!lookup(r)) missing = std::get<0>(r) + "[" + std::to_string(std::get<1>(r)) + "]";
        }
        return Bad("layer '" + NameOf(*stuck.entry) + "' is called on " + missing +
                   ", which no layer of the model makes");
      }
    }
    std::vector<int> outs;
    for (const Ref& r : out_refs) {
      std::optional<int> t = lookup(r);
      if (!t) return Bad("output layer '" + std::get<0>(r) + "' makes no such tensor");
      outs.push_back(*t);
      if (inputs == nullptr) output_names.push_back(std::get<0>(r));
    }
    return outs;
  }

  // One recorded call: maps its arguments onto the layer's inputs.
  template <typename Lookup>
  absl::StatusOr<std::vector<int>> Node(const json& e, const CallSpec& spec, Lookup& lookup) {
    const std::string cls = ClassOf(e);
    const std::string name = NameOf(e);
    std::vector<int> in;
    for (const Ref& r : spec.inputs) in.push_back(*lookup(r));
    std::map<std::string, json> kw = spec.kwargs;
    auto refuse = [&](const std::string& what) {
      return absl::InvalidArgumentError("layer '" + name + "' (" + cls + "): " + what +
                                        " is not supported");
    };
    std::optional<bool> training;
    if (auto t = kw.find("training"); t != kw.end()) {
      // Keras 3's functional models pass the model's own mode to every layer, whatever the
      // recorded call said; Keras 2 keeps an explicit training argument (Monte Carlo dropout).
      if (!keras3_ && t->second.is_boolean()) training = t->second.get<bool>();
      kw.erase(t);
    }
    std::optional<int> mask;
    if (auto m = kw.find("mask"); m != kw.end()) {
      std::vector<Ref> r = RefsIn(m->second);
      if (r.size() == 1) {
        mask = *lookup(r[0]);
      } else if (!m->second.is_null()) {
        return refuse("call argument mask=" + Show(m->second));
      }
      kw.erase(m);
    }
    bool causal = false;  // MultiHeadAttention's use_causal_mask
    if (cls == "MultiHeadAttention") {
      // Inputs [query, value] or [query, value, key], from positions or keywords.
      std::vector<int> qvk = in;
      for (const char* k : {"query", "value", "key"}) {
        auto it = kw.find(k);
        if (it == kw.end()) continue;
        std::vector<Ref> r = RefsIn(it->second);
        if (r.size() == 1) {
          const size_t pos = std::string(k) == "query" ? 0 : std::string(k) == "value" ? 1 : 2;
          if (qvk.size() <= pos) qvk.resize(pos + 1, -1);
          qvk[pos] = *lookup(r[0]);
        } else if (!it->second.is_null()) {
          return refuse("call argument " + std::string(k) + "=" + Show(it->second));
        }
        kw.erase(it);
      }
      if (qvk.size() < 2 || qvk[0] < 0 || qvk[1] < 0 || (qvk.size() > 2 && qvk[2] < 0)) {
        return refuse("a call without both query and value");
      }
      in = qvk;
      if (auto it = kw.find("use_causal_mask"); it != kw.end()) {
        if (!it->second.is_boolean() && !it->second.is_null()) {
          return refuse("call argument use_causal_mask=" + Show(it->second));
        }
        causal = it->second.is_boolean() && it->second.get<bool>();
        kw.erase(it);
      }
      for (const char* k : {"attention_mask", "return_attention_scores"}) {
        auto it = kw.find(k);
        if (it == kw.end()) continue;
        if (!IsFalsy(it->second))
          return refuse("call argument " + std::string(k) + "=" + Show(it->second));
        kw.erase(it);
      }
    }
    if (auto s = kw.find("initial_state"); s != kw.end()) {
      for (const Ref& r : RefsIn(s->second)) in.push_back(*lookup(r));
      if (RefsIn(s->second).empty() && !s->second.is_null()) {
        return refuse("call argument initial_state=" + Show(s->second));
      }
      kw.erase(s);
    }
    for (const auto& [k, v] : kw) {
      if (!IsFalsy(v)) return refuse("call argument " + k + "=" + Show(v));
    }
    if (mask) {
      if (in.empty()) return refuse("a mask without an input");
      Layer* mw = g_->AddLayer(graph::MakeMaskWith(name + "/mask"));
      absl::StatusOr<std::vector<int>> masked = Call(mw, {in[0], *mask});
      if (!masked.ok()) return masked.status();
      in[0] = (*masked)[0];
    }
    if (IsModelClass(cls)) {
      if (!spec.constants.empty()) return refuse("a model called with constants");
      return Model(e, &in);
    }
    if (!spec.constants.empty()) return OpLayer(e, in, spec.constants);
    absl::StatusOr<Layer*> l = LayerFor(e);
    if (!l.ok()) return l.status();
    if (cls == "MultiHeadAttention") {
      // Keras passes use_causal_mask per call; one layer object takes one setting.
      auto [it, fresh] = causal_.emplace(*l, causal);
      if (!fresh && it->second != causal) {
        return refuse(
            "calls with and without use_causal_mask (the engine keeps one setting per "
            "layer)");
      }
      graph::SetCausalMask(**l, causal);
    }
    return Call(*l, in, training);
  }

  // Keras 3 operations recorded as layers with a constant operand (ops.not_equal(x, 0)).
  absl::StatusOr<std::vector<int>> OpLayer(const json& e, const std::vector<int>& in,
                                           const std::vector<json>& constants) {
    const std::string cls = ClassOf(e);
    static const std::map<std::string, CompareOp> kCompare = {
        {"Equal", CompareOp::kEqual},     {"NotEqual", CompareOp::kNotEqual},
        {"Greater", CompareOp::kGreater}, {"GreaterEqual", CompareOp::kGreaterEqual},
        {"Less", CompareOp::kLess},       {"LessEqual", CompareOp::kLessEqual}};
    auto op = kCompare.find(cls);
    if (op == kCompare.end() || in.size() != 1 || constants.size() != 1 ||
        !constants[0].is_number()) {
      return absl::InvalidArgumentError("layer '" + NameOf(e) + "' (" + cls +
                                        "): this operation with constant operands " +
                                        Show(json(constants)) + " is not supported");
    }
    LayerConfig c(e.value("config", json::object()), NameOf(e), cls, keras3_);
    ReadCommonOptions(c);
    if (absl::Status s = c.Finish(); !s.ok()) return s;
    Layer* l =
        g_->AddLayer(graph::MakeCompare(NameOf(e), cls, op->second, constants[0].get<float>()));
    return Call(l, in);
  }

  Graph* g_;
  bool keras3_;
  std::mt19937_64 rng_;
  int64_t open_axis_size_ = 0;
  graph::BuildContext ctx_;
  std::map<const json*, Layer*> layers_;
  std::map<Layer*, bool> causal_;  // each MultiHeadAttention's use_causal_mask
};

bool LooksKeras3(const json& m) {
  if (m.contains("module") || m.contains("registered_name")) return true;
  const json& cfg = m.value("config", json());
  if (cfg.is_object() && cfg.contains("layers") && cfg["layers"].is_array()) {
    for (const json& l : cfg["layers"]) {
      if (l.contains("module") && l.contains("inbound_nodes") && l["inbound_nodes"].is_array() &&
          !l["inbound_nodes"].empty() && l["inbound_nodes"][0].is_object()) {
        return true;
      }
      if (l.contains("module") && ClassOf(m) == "Sequential" && l.contains("build_config") &&
          l["config"].is_object() && l["config"].contains("dtype") &&
          l["config"]["dtype"].is_object()) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<KerasModel> LoadKerasModel(const json& doc, const LoadOptions& o) {
  KerasModel out;
  json normalized;
  const json* model = &doc;
  out.training_config = TrainingConfigOf(doc);
  if (doc.is_object() && doc.contains("modelTopology")) {  // TensorFlow.js
    const json& topo = doc["modelTopology"];
    out.format = "tfjs";
    model = topo.contains("model_config") ? &topo["model_config"] : &topo;
  }
  normalized = *model;
  NormalizeModel(normalized, out.format == "tfjs");
  model = &normalized;
  if (absl::Status s = CheckDeclaredShapes(*model); !s.ok()) return s;
  const std::string cls = ClassOf(*model);
  if (!IsModelClass(cls)) {
    return Bad(cls.empty() ? "no model class_name (is this a Keras model file?)"
                           : "the top-level class is " + cls + ", not a model");
  }
  out.keras3 = out.format.empty() && LooksKeras3(*model);
  if (out.format.empty()) {
    out.format = out.keras3            ? "keras3"
                 : cls == "Sequential" ? "keras2-sequential"
                                       : "keras2-functional";
  }
  out.name = NameOf(*model);
  if (absl::Status s = CheckClasses(*model, out.keras3); !s.ok()) return s;
  // Built from the kept copy: the entry -> layer map holds addresses into it.
  auto config = std::make_shared<const json>(*model);
  out.graph = std::make_unique<Graph>();
  Builder b(out.graph.get(), out.keras3, o.seed, o.open_axis_size);
  absl::StatusOr<std::vector<int>> outs = b.Model(*config, nullptr);
  if (!outs.ok()) return outs.status();
  out.graph->SetOutputs(*outs);
  out.output_names = b.output_names;
  out.layer_of = b.layers();
  out.config = std::move(config);
  return out;
}

absl::StatusOr<KerasModel> LoadKerasModelFile(const std::string& path, const LoadOptions& o) {
  absl::StatusOr<json> doc = ReadJsonFile(path);
  if (!doc.ok()) return doc.status();
  absl::StatusOr<KerasModel> m = LoadKerasModel(*doc, o);
  if (!m.ok())
    return absl::Status(m.status().code(), path + ": " + std::string(m.status().message()));
  return m;
}

}  // namespace lockstep::trainer::keras