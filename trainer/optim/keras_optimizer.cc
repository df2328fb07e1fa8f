#include "trainer/optim/keras_optimizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "trainer/kernels/cpu/simd.h"
#include "trainer/kernels/cpu/update.h"

namespace lockstep::trainer {
namespace {

using nlohmann::json;

std::string Lower(const std::string& s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const json& ConfigOf(const json& v) {
  static const json kEmpty = json::object();
  return v.is_object() && v.contains("config") && v["config"].is_object() ? v["config"] : kEmpty;
}

// The sum of g^2: 64 float lanes over blocks of 1,024 elements, each block's lanes added into
// 64 double lanes, which are summed in a fixed order at the end. Independent lanes keep the
// vector units busy (one running double sum is a chain of dependent adds: 37 us for the mlp's
// 270k gradients, three quarters of an Adam step); each float lane sums only 16 squares, so the
// result stays within float rounding of the exact sum, and it is deterministic.
LOCKSTEP_SIMD_CLONES double SumOfSquares(const float* __restrict g, int64_t n) {
  constexpr int kLanes = 64;
  constexpr int64_t kBlock = 1024;
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kBlock <= n; j += kBlock) {
    float acc[kLanes] = {};
    for (int64_t b = j; b < j + kBlock; b += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += g[b + l] * g[b + l];
    }
    for (int l = 0; l < kLanes; ++l) lanes[l] += acc[l];
  }
  double total = 0;
  for (; j < n; ++j) total += static_cast<double>(g[j]) * g[j];
  for (double v : lanes) total += v;
  return total;
}

class KerasOptimizer final : public Optimizer {
 public:
  explicit KerasOptimizer(KerasOptimizerOptions o)
      : Optimizer(o.learning_rate), o_(std::move(o)), step_({1}) {}
  std::string name() const override { return o_.kind; }

  void Init(const std::vector<Tensor*>& params) override {
    if (initialized_ == params.size()) return;
    slots_.clear();
    const int n = SlotsPerParam();
    for (Tensor* p : params) {
      for (int k = 0; k < n; ++k) {
        slots_.emplace_back(p->shape(), o_.kind == "adagrad" ? o_.initial_accumulator_value : 0.0f);
      }
    }
    initialized_ = params.size();
  }

  void Step(const std::vector<Tensor*>& params, const std::vector<Tensor*>& grads) override {
    Init(params);
    UpdateParams u = BeginExternalStep().u;
    float global = 1.0f;
    if (o_.global_clipnorm > 0) {
      double sq = 0;
      for (Tensor* g : grads) sq += SumOfSquares(g->data(), g->size());
      const double norm = std::sqrt(sq);
      if (norm > o_.global_clipnorm) global = static_cast<float>(o_.global_clipnorm / norm);
    }
    const int n = SlotsPerParam();
    auto slot = [&](size_t i, int k) {
      return n > k ? slots_[i * static_cast<size_t>(n) + static_cast<size_t>(k)].data() : nullptr;
    };
    for (size_t i = 0; i < params.size(); ++i) {
      u.scale = global;
      if (o_.clipnorm > 0) {
        const double norm = std::sqrt(SumOfSquares(grads[i]->data(), grads[i]->size())) * global;
        if (norm > o_.clipnorm) u.scale *= static_cast<float>(o_.clipnorm / norm);
      }
      ApplyUpdate(u, params[i]->data(), grads[i]->data(), slot(i, 0), slot(i, 1), slot(i, 2),
                  params[i]->size());
    }
  }

  std::vector<Tensor*> State() override {
    std::vector<Tensor*> out{&step_};
    for (Tensor& t : slots_) out.push_back(&t);
    return out;
  }

  ExternalStep BeginExternalStep() override {
    step_[0] += 1.0f;
    return {.u = Params(), .clipnorm = o_.clipnorm, .global_clipnorm = o_.global_clipnorm};
  }
  std::vector<Tensor*> Slots(int k) override {
    std::vector<Tensor*> out;
    const int n = SlotsPerParam();
    for (size_t i = static_cast<size_t>(k); k < n && i < slots_.size();
         i += static_cast<size_t>(n)) {
      out.push_back(&slots_[i]);
    }
    return out;
  }
  int SlotsPerParam() const override {
    if (o_.kind == "sgd") return o_.momentum > 0 ? 1 : 0;
    if (o_.kind == "adam" || o_.kind == "adamw") return o_.amsgrad ? 3 : 2;
    if (o_.kind == "rmsprop") return 1 + (o_.momentum > 0 ? 1 : 0) + (o_.centered ? 1 : 0);
    return 1;  // adagrad
  }

  // This step's constants of the rule (the gradient scale comes per tensor).
  UpdateParams Params() const {
    UpdateParams u;
    u.lr = lr_;
    u.keep = o_.weight_decay > 0 ? 1.0f - lr_ * o_.weight_decay : 1.0f;
    u.clip = o_.clipvalue > 0 ? o_.clipvalue : 3.4e38f;
    u.momentum = o_.momentum;
    u.eps = o_.epsilon;
    u.rho = o_.rho;
    if (o_.kind == "sgd") {
      u.rule = o_.momentum == 0 ? UpdateRule::kKerasSgd
               : o_.nesterov    ? UpdateRule::kKerasNesterov
                                : UpdateRule::kKerasMomentum;
    } else if (o_.kind == "adam" || o_.kind == "adamw") {
      u.rule = o_.amsgrad ? UpdateRule::kKerasAmsgrad : UpdateRule::kKerasAdam;
      const double t = step_[0];
      u.alpha = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(o_.beta_2, t)) /
                                   (1.0 - std::pow(o_.beta_1, t)));
      u.a1 = 1.0f - o_.beta_1;
      u.a2 = 1.0f - o_.beta_2;
    } else if (o_.kind == "rmsprop") {
      u.rule = o_.centered ? (o_.momentum > 0 ? UpdateRule::kKerasRmspropCenteredMomentum
                                              : UpdateRule::kKerasRmspropCentered)
                           : (o_.momentum > 0 ? UpdateRule::kKerasRmspropMomentum
                                              : UpdateRule::kKerasRmsprop);
    } else {
      u.rule = UpdateRule::kKerasAdagrad;
    }
    return u;
  }

  KerasOptimizerOptions o_;
  Tensor step_;
  std::vector<Tensor> slots_;
  size_t initialized_ = 0;
};

}  // namespace

absl::StatusOr<KerasOptimizerOptions> ParseKerasOptimizer(const json& v) {
  std::string cls;
  if (v.is_string()) {
    cls = v.get<std::string>();
  } else if (v.is_object() && v.contains("class_name") && v["class_name"].is_string()) {
    cls = v["class_name"].get<std::string>();
  } else {
    return absl::InvalidArgumentError("optimizer " + v.dump() + " is not an optimizer");
  }
  if (cls.rfind("Custom>", 0) == 0) cls = cls.substr(7);  // TensorFlow.js's spelling
  KerasOptimizerOptions o;
  o.kind = Lower(cls);
  if (o.kind != "sgd" && o.kind != "adam" && o.kind != "adamw" && o.kind != "rmsprop" &&
      o.kind != "adagrad") {
    return absl::InvalidArgumentError("optimizer " + cls +
                                      " is not supported (supported: SGD, Adam, AdamW, RMSprop, "
                                      "Adagrad)");
  }
  if (o.kind == "sgd") o.learning_rate = 0.01f;
  if (o.kind == "adamw") o.weight_decay = 0.004f;
  const json& c = ConfigOf(v);
  for (auto it = c.begin(); it != c.end(); ++it) {
    const std::string& k = it.key();
    const json& val = it.value();
    auto num = [&](float* out) {
      if (val.is_null()) return true;
      if (!val.is_number()) return false;
      *out = val.get<float>();
      return true;
    };
    auto flag = [&](bool* out) {
      if (!val.is_boolean()) return false;
      *out = val.get<bool>();
      return true;
    };
    bool ok = false;
    if (k == "name" || k == "is_legacy_optimizer" || k == "jit_compile" ||
        k == "loss_scale_factor" || k == "ema_momentum" || k == "ema_overwrite_frequency") {
      ok = true;  // naming and execution hints, or settings that only matter with use_ema
    } else if (k == "learning_rate" || k == "lr") {
      if (val.is_object()) {
        if (absl::Status s = CheckKerasSchedule(val); !s.ok()) return s;
        o.schedule = val;
        o.learning_rate = KerasScheduleAt(val, 0);
        ok = true;
      } else {
        ok = num(&o.learning_rate);
      }
    } else if (k == "momentum") {
      ok = num(&o.momentum);
    } else if (k == "nesterov") {
      ok = flag(&o.nesterov);
    } else if (k == "beta_1") {
      ok = num(&o.beta_1);
    } else if (k == "beta_2") {
      ok = num(&o.beta_2);
    } else if (k == "epsilon") {
      ok = num(&o.epsilon);
    } else if (k == "amsgrad") {
      ok = flag(&o.amsgrad);
    } else if (k == "rho") {
      ok = num(&o.rho);
    } else if (k == "centered") {
      ok = flag(&o.centered);
    } else if (k == "initial_accumulator_value") {
      ok = num(&o.initial_accumulator_value);
    } else if (k == "weight_decay") {
      ok = num(&o.weight_decay);
    } else if (k == "clipnorm") {
      ok = num(&o.clipnorm);
    } else if (k == "global_clipnorm") {
      ok = num(&o.global_clipnorm);
    } else if (k == "clipvalue") {
      ok = num(&o.clipvalue);
    } else if (k == "use_ema") {
      ok = val.is_boolean() && !val.get<bool>();
    } else if (k == "decay") {
      ok = val.is_number() && val.get<double>() == 0;  // Keras 2's inverse-time decay
    } else if (k == "gradient_accumulation_steps") {
      ok = val.is_null();
    }
    if (!ok) {
      return absl::InvalidArgumentError("optimizer " + cls + ": option " + k + "=" + val.dump() +
                                        " is not supported");
    }
  }
  if (!(o.learning_rate > 0))
    return absl::InvalidArgumentError("optimizer " + cls + ": learning_rate must be positive");
  return o;
}

std::unique_ptr<Optimizer> MakeKerasOptimizer(const KerasOptimizerOptions& o) {
  return std::make_unique<KerasOptimizer>(o);
}

absl::Status CheckKerasSchedule(const json& s) {
  const std::string cls = s.value("class_name", "");
  const json& c = ConfigOf(s);
  auto need = [&](const char* k) { return c.contains(k) && c[k].is_number(); };
  if (cls == "ExponentialDecay") {
    if (need("initial_learning_rate") && need("decay_steps") && need("decay_rate") &&
        c["decay_steps"].get<double>() > 0) {
      return absl::OkStatus();
    }
  } else if (cls == "CosineDecay") {
    if (need("initial_learning_rate") && need("decay_steps") &&
        c["decay_steps"].get<double>() > 0) {
      return absl::OkStatus();
    }
  } else if (cls == "PiecewiseConstantDecay") {
    if (c.contains("boundaries") && c.contains("values") && c["boundaries"].is_array() &&
        c["values"].is_array() && c["values"].size() == c["boundaries"].size() + 1) {
      return absl::OkStatus();
    }
  } else {
    return absl::InvalidArgumentError("learning-rate schedule " + s.dump().substr(0, 80) +
                                      " is not supported (supported: ExponentialDecay, "
                                      "CosineDecay, PiecewiseConstantDecay)");
  }
  return absl::InvalidArgumentError("learning-rate schedule " + cls +
                                    " is missing options: " + c.dump().substr(0, 120));
}

float KerasScheduleAt(const json& s, int64_t step) {
  const std::string cls = s.value("class_name", "");
  const json& c = ConfigOf(s);
  const auto t = static_cast<double>(step);
  if (cls == "ExponentialDecay") {
    double p = t / c["decay_steps"].get<double>();
    if (c.value("staircase", false)) p = std::floor(p);
    return static_cast<float>(c["initial_learning_rate"].get<double>() *
                              std::pow(c["decay_rate"].get<double>(), p));
  }
  if (cls == "CosineDecay") {
    const double init = c["initial_learning_rate"].get<double>();
    const double steps = c["decay_steps"].get<double>();
    const double alpha = c.value("alpha", 0.0);
    const double warmup = c.contains("warmup_steps") && c["warmup_steps"].is_number()
                              ? c["warmup_steps"].get<double>()
                              : 0.0;
    const bool has_target = c.contains("warmup_target") && c["warmup_target"].is_number();
    const double target = has_target ? c["warmup_target"].get<double>() : init;
    if (t < warmup) return static_cast<float>(init + (target - init) * t / warmup);
    const double done = std::min(t - warmup, steps) / steps;
    const double cosine = 0.5 * (1 + std::cos(3.14159265358979323846 * done));
    return static_cast<float>(target * ((1 - alpha) * cosine + alpha));
  }
  if (cls == "PiecewiseConstantDecay") {
    const json& b = c["boundaries"];
    size_t i = 0;
    while (i < b.size() && t > b[i].get<double>()) ++i;
    return c["values"][i].get<float>();
  }
  return 0.0f;
}

}  // namespace lockstep::trainer
