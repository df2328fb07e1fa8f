#include "trainer/keras/layer_config.h"

#include <algorithm>
#include <cctype>

namespace lockstep::trainer::keras {

using nlohmann::json;

std::string Show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

LayerConfig::LayerConfig(json config, std::string name, std::string class_name, bool keras3)
    : config_(std::move(config)),
      name_(std::move(name)),
      class_name_(std::move(class_name)),
      keras3_(keras3) {
  if (!config_.is_object()) {
    error_ = "its config is not an object";
    config_ = json::object();
  }
}

absl::Status LayerConfig::Prefix(const std::string& message) const {
  return absl::InvalidArgumentError("layer '" + name_ + "' (" + class_name_ + "): " + message);
}

void LayerConfig::Refuse(const std::string& what) {
  if (error_.empty()) error_ = what + " is not supported";
}

void LayerConfig::Error(const std::string& what) {
  if (error_.empty()) error_ = what;
}

bool LayerConfig::Has(const std::string& key) const {
  auto it = config_.find(key);
  return it != config_.end() && !it->is_null();
}

const json* LayerConfig::Get(const std::string& key) {
  read_.insert(key);
  auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return nullptr;
  return &*it;
}

void LayerConfig::Ignore(const std::string& key) { read_.insert(key); }

int64_t LayerConfig::Int(const std::string& key, int64_t def) {
  const json* v = Get(key);
  if (v == nullptr) return def;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float() && v->get<double>() == static_cast<double>(v->get<int64_t>())) {
    return v->get<int64_t>();
  }
  Error("option " + key + "=" + Show(*v) + " is not an integer");
  return def;
}

float LayerConfig::Float(const std::string& key, float def) {
  const json* v = Get(key);
  if (v == nullptr) return def;
  if (v->is_number()) return v->get<float>();
  Error("option " + key + "=" + Show(*v) + " is not a number");
  return def;
}

bool LayerConfig::Bool(const std::string& key, bool def) {
  const json* v = Get(key);
  if (v == nullptr) return def;
  if (v->is_boolean()) return v->get<bool>();
  Error("option " + key + "=" + Show(*v) + " is not true or false");
  return def;
}

std::string LayerConfig::String(const std::string& key, const std::string& def) {
  const json* v = Get(key);
  if (v == nullptr) return def;
  if (v->is_string()) return v->get<std::string>();
  Error("option " + key + "=" + Show(*v) + " is not a string");
  return def;
}

std::vector<int64_t> LayerConfig::Ints(const std::string& key, size_t n, int64_t def) {
  const json* v = Get(key);
  if (v == nullptr) return std::vector<int64_t>(n, def);
  if (v->is_number_integer()) return std::vector<int64_t>(n, v->get<int64_t>());
  if (v->is_array() && v->size() == n &&
      std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_number_integer(); })) {
    return v->get<std::vector<int64_t>>();
  }
  Error("option " + key + "=" + Show(*v) + " is not an integer or a list of " + std::to_string(n));
  return std::vector<int64_t>(n, def);
}

std::vector<int64_t> LayerConfig::IntList(const std::string& key) {
  const json* v = Get(key);
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (!v->is_array()) {
    Error("option " + key + "=" + Show(*v) + " is not a list");
    return out;
  }
  for (const json& e : *v) {
    if (e.is_null()) {
      out.push_back(-1);
    } else if (e.is_number_integer()) {
      out.push_back(e.get<int64_t>());
    } else {
      Error("option " + key + "=" + Show(*v) + " is not a list of integers");
      return {};
    }
  }
  return out;
}

std::vector<int64_t> LayerConfig::Axes(const std::string& key, std::vector<int64_t> def) {
  const json* v = Get(key);
  if (v == nullptr) return def;
  if (v->is_number_integer()) return {v->get<int64_t>()};
  if (v->is_array() &&
      std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_number_integer(); })) {
    return v->get<std::vector<int64_t>>();
  }
  Error("option " + key + "=" + Show(*v) + " is not an axis or a list of axes");
  return def;
}

trainer::Activation LayerConfig::Activation(const std::string& key, const std::string& def) {
  const json* v = Get(key);
  std::string name = def;
  if (v != nullptr) {
    if (v->is_string()) {
      name = v->get<std::string>();
    } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
      // Keras 3 may write a function as {"class_name": "function", "config": "relu"}.
      const json& c = (*v)["config"];
      name = c.is_string() ? c.get<std::string>() : (*v)["class_name"].get<std::string>();
    } else {
      Error("option " + key + "=" + Show(*v) + " is not an activation name");
    }
  }
  absl::StatusOr<trainer::Activation> a = graph::ParseActivation(name, keras3_);
  if (!a.ok()) {
    Refuse("option " + key + "=\"" + name + "\"");
    return {};
  }
  return *a;
}

namespace {

std::string Snake(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (i > 0) out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

graph::Initializer LayerConfig::Initializer(const std::string& key, const graph::Initializer& def) {
  using I = graph::Initializer;
  const json* v = Get(key);
  if (v == nullptr) return def;
  std::string cls;
  json cfg = json::object();
  if (v->is_string()) {
    cls = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    cls = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && (*v)["config"].is_object()) cfg = (*v)["config"];
  } else {
    Error("option " + key + "=" + Show(*v) + " is not an initializer");
    return def;
  }
  std::string n = cls.find('_') != std::string::npos || std::islower(cls[0]) ? cls : Snake(cls);
  // Keras 3 also names some classes ...Initializer (OrthogonalInitializer, IdentityInitializer).
  if (n.size() > 12 && n.substr(n.size() - 12) == "_initializer") n.resize(n.size() - 12);
  I out;
  auto num = [&](const char* k, float d) {
    return cfg.contains(k) && cfg[k].is_number() ? cfg[k].get<float>() : d;
  };
  if (cfg.contains("seed") && cfg["seed"].is_number_integer())
    out.seed = cfg["seed"].get<int64_t>();
  auto vs = [&](float scale, I::Mode mode, I::Distribution dist) {
    out.kind = I::Kind::kVarianceScaling;
    out.scale = scale;
    out.mode = mode;
    out.distribution = dist;
  };
  if (n == "zeros" || n == "zero") {
    out.kind = I::Kind::kZeros;
  } else if (n == "ones" || n == "one") {
    out.kind = I::Kind::kOnes;
  } else if (n == "constant") {
    out.kind = I::Kind::kConstant;
    out.value = num("value", 0);
  } else if (n == "random_normal") {
    out.kind = I::Kind::kRandomNormal;
    out.mean = num("mean", 0);
    out.stddev = num("stddev", 0.05f);
  } else if (n == "random_uniform") {
    out.kind = I::Kind::kRandomUniform;
    out.minval = num("minval", -0.05f);
    out.maxval = num("maxval", 0.05f);
  } else if (n == "truncated_normal") {
    out.kind = I::Kind::kTruncatedNormal;
    out.mean = num("mean", 0);
    out.stddev = num("stddev", 0.05f);
  } else if (n == "glorot_uniform") {
    vs(1, I::Mode::kFanAvg, I::Distribution::kUniform);
  } else if (n == "glorot_normal") {
    vs(1, I::Mode::kFanAvg, I::Distribution::kTruncatedNormal);
  } else if (n == "he_uniform") {
    vs(2, I::Mode::kFanIn, I::Distribution::kUniform);
  } else if (n == "he_normal") {
    vs(2, I::Mode::kFanIn, I::Distribution::kTruncatedNormal);
  } else if (n == "lecun_uniform") {
    vs(1, I::Mode::kFanIn, I::Distribution::kUniform);
  } else if (n == "lecun_normal") {
    vs(1, I::Mode::kFanIn, I::Distribution::kTruncatedNormal);
  } else if (n == "variance_scaling") {
    const std::string mode = cfg.value("mode", "fan_in");
    const std::string dist = cfg.value("distribution", "truncated_normal");
    I::Mode m = mode == "fan_out"   ? I::Mode::kFanOut
                : mode == "fan_avg" ? I::Mode::kFanAvg
                                    : I::Mode::kFanIn;
    if (mode != "fan_in" && mode != "fan_out" && mode != "fan_avg") {
      Refuse("option " + key + " mode \"" + mode + "\"");
    }
    // Keras 2.0 called the truncated normal "normal".
    I::Distribution d = dist == "uniform"              ? I::Distribution::kUniform
                        : dist == "untruncated_normal" ? I::Distribution::kUntruncatedNormal
                                                       : I::Distribution::kTruncatedNormal;
    if (dist != "uniform" && dist != "untruncated_normal" && dist != "truncated_normal" &&
        dist != "normal") {
      Refuse("option " + key + " distribution \"" + dist + "\"");
    }
    vs(num("scale", 1), m, d);
  } else if (n == "orthogonal") {
    out.kind = I::Kind::kOrthogonal;
    out.value = num("gain", 1);
  } else if (n == "identity") {
    out.kind = I::Kind::kIdentity;
    out.value = num("gain", 1);
  } else {
    Refuse("option " + key + "=" + Show(*v) + " (initializer " + cls + ")");
    return def;
  }
  return out;
}

Regularizer LayerConfig::Regularization(const std::string& key) {
  const json* v = Get(key);
  Regularizer r;
  if (v == nullptr) return r;
  std::string cls;
  json cfg = json::object();
  if (v->is_string()) {
    cls = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    cls = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && (*v)["config"].is_object()) cfg = (*v)["config"];
  }
  auto num = [&](const char* k, float d) {
    return cfg.contains(k) && cfg[k].is_number() ? cfg[k].get<float>() : d;
  };
  if (cls == "L1" || cls == "l1") {
    r.l1 = num("l1", 0.01f);
  } else if (cls == "L2" || cls == "l2") {
    r.l2 = num("l2", 0.01f);
  } else if (cls == "L1L2" || cls == "l1_l2") {
    r.l1 = num("l1", 0.0f);
    r.l2 = num("l2", 0.0f);
  } else {
    Refuse("option " + key + "=" + Show(*v));
  }
  return r;
}

json LayerConfig::Object(const std::string& key) {
  const json* v = Get(key);
  return v == nullptr ? json() : *v;
}

void LayerConfig::ExpectNull(std::initializer_list<const char*> keys) {
  for (const char* k : keys) Expect(k, nullptr);
}

void LayerConfig::Expect(const std::string& key, const json& expected) {
  const json* v = Get(key);
  if (v == nullptr) {
    if (!expected.is_null() && Has(key)) Refuse("option " + key + "=null");
    return;
  }
  if (*v == expected) return;
  // Numbers compare by value (0 and 0.0).
  if (v->is_number() && expected.is_number() && v->get<double>() == expected.get<double>()) {
    return;
  }
  Refuse("option " + key + "=" + Show(*v));
}

absl::Status LayerConfig::Finish() {
  if (error_.empty()) {
    for (auto it = config_.begin(); it != config_.end(); ++it) {
      if (read_.count(it.key()) == 0) {
        Refuse("option " + it.key() + "=" + Show(it.value()));
        break;
      }
    }
  }
  if (error_.empty()) return absl::OkStatus();
  return Prefix(error_);
}

int64_t ReadLastAxis(LayerConfig& c, const std::string& key) {
  const json shown = c.raw().contains(key) ? c.raw()[key] : json();
  const std::vector<int64_t> axes = c.Axes(key, {-1});
  if (axes.size() != 1 || (axes[0] != -1 && axes[0] < 1)) {
    c.Refuse("option " + key + "=" + Show(shown) + " (only the last axis, channels-last)");
    return -1;
  }
  return axes[0];
}

}  // namespace lockstep::trainer::keras
