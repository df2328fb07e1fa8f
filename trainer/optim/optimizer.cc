#include "trainer/optim/optimizer.h"

#include <cmath>

#include "trainer/kernels/cpu/update.h"
#include "trainer/optim/keras_optimizer.h"

namespace lockstep::trainer {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(float lr, float momentum) : Optimizer(lr), momentum_(momentum) {}
  std::string name() const override { return "sgd"; }
  void Init(const std::vector<Tensor*>& params) override {
    if (momentum_ == 0.0f || velocity_.size() == params.size()) return;
    velocity_.clear();
    for (Tensor* p : params) velocity_.emplace_back(p->shape());
  }
  void Step(const std::vector<Tensor*>& params, const std::vector<Tensor*>& grads) override {
    Init(params);
    const UpdateParams u = BeginExternalStep().u;
    for (size_t i = 0; i < params.size(); ++i) {
      ApplyUpdate(u, params[i]->data(), grads[i]->data(),
                  momentum_ == 0.0f ? nullptr : velocity_[i].data(), nullptr, nullptr,
                  params[i]->size());
    }
  }
  std::vector<Tensor*> State() override {
    std::vector<Tensor*> out;
    for (Tensor& t : velocity_) out.push_back(&t);
    return out;
  }
  ExternalStep BeginExternalStep() override {
    ExternalStep x;
    x.u.rule = UpdateRule::kTorchSgd;
    x.u.lr = lr_;
    x.u.momentum = momentum_;
    return x;
  }
  int SlotsPerParam() const override { return momentum_ == 0.0f ? 0 : 1; }
  std::vector<Tensor*> Slots(int k) override { return k == 0 ? State() : std::vector<Tensor*>{}; }

 private:
  float momentum_;
  std::vector<Tensor> velocity_;
};

class Adam final : public Optimizer {
 public:
  explicit Adam(float lr) : Optimizer(lr), step_({1}) {}
  std::string name() const override { return "adam"; }
  void Init(const std::vector<Tensor*>& params) override {
    if (m_.size() == params.size()) return;
    m_.clear();
    v_.clear();
    for (Tensor* p : params) {
      m_.emplace_back(p->shape());
      v_.emplace_back(p->shape());
    }
  }
  void Step(const std::vector<Tensor*>& params, const std::vector<Tensor*>& grads) override {
    Init(params);
    const UpdateParams u = BeginExternalStep().u;
    for (size_t i = 0; i < params.size(); ++i) {
      ApplyUpdate(u, params[i]->data(), grads[i]->data(), m_[i].data(), v_[i].data(), nullptr,
                  params[i]->size());
    }
  }
  std::vector<Tensor*> State() override {
    std::vector<Tensor*> out{&step_};
    for (Tensor& t : m_) out.push_back(&t);
    for (Tensor& t : v_) out.push_back(&t);
    return out;
  }
  ExternalStep BeginExternalStep() override {
    step_[0] += 1.0f;
    const double t = step_[0];
    const float c1 = static_cast<float>(1.0 - std::pow(kBeta1, t));
    const float c2 = static_cast<float>(1.0 - std::pow(kBeta2, t));
    ExternalStep x;
    x.u.rule = UpdateRule::kTorchAdam;
    x.u.alpha = lr_ * std::sqrt(c2) / c1;
    x.u.eps = kEpsilon * std::sqrt(c2);
    x.u.beta1 = kBeta1;
    x.u.beta2 = kBeta2;
    x.u.a1 = 1.0f - kBeta1;
    x.u.a2 = 1.0f - kBeta2;
    return x;
  }
  int SlotsPerParam() const override { return 2; }
  std::vector<Tensor*> Slots(int k) override {
    std::vector<Tensor*> out;
    if (k < 2) {
      for (Tensor& t : k == 0 ? m_ : v_) out.push_back(&t);
    }
    return out;
  }

 private:
  static constexpr float kBeta1 = 0.9f;
  static constexpr float kBeta2 = 0.999f;
  static constexpr float kEpsilon = 1e-7f;
  Tensor step_;  // one element: the step count (exact in fp32 up to 2^24 steps)
  std::vector<Tensor> m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeSgd(float lr, float momentum) {
  return std::make_unique<Sgd>(lr, momentum);
}
std::unique_ptr<Optimizer> MakeAdam(float lr) { return std::make_unique<Adam>(lr); }

float ScheduledLearningRate(const std::string& schedule, float base, int64_t step, int64_t total) {
  if (schedule != "cosine" || total <= 0) return base;
  const double t = static_cast<double>(std::min(step, total)) / static_cast<double>(total);
  return static_cast<float>(base * 0.5 * (1.0 + std::cos(3.14159265358979323846 * t)));
}

absl::StatusOr<LearningRate> LearningRate::Make(const std::string& schedule, float base,
                                                const std::string& keras_optimizer) {
  LearningRate r;
  r.schedule_ = schedule;
  r.base_ = base;
  if (!keras_optimizer.empty()) {
    absl::StatusOr<KerasOptimizerOptions> o =
        ParseKerasOptimizer(nlohmann::json::parse(keras_optimizer, nullptr, false));
    if (!o.ok()) return o.status();
    r.keras_schedule_ = o->schedule;
  }
  return r;
}

float LearningRate::At(int64_t step, int64_t total) const {
  if (!keras_schedule_.is_null()) return KerasScheduleAt(keras_schedule_, step);
  return ScheduledLearningRate(schedule_, base_, step, total);
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const std::string& name, float lr,
                                                         float momentum,
                                                         const std::string& keras_optimizer) {
  if (!keras_optimizer.empty()) {
    absl::StatusOr<KerasOptimizerOptions> o =
        ParseKerasOptimizer(nlohmann::json::parse(keras_optimizer, nullptr, false));
    if (!o.ok()) return o.status();
    return MakeKerasOptimizer(*o);
  }
  if (!(lr > 0.0f)) return absl::InvalidArgumentError("--learning-rate must be positive");
  if (name == "sgd") {
    if (momentum < 0.0f || momentum >= 1.0f) {
      return absl::InvalidArgumentError("--momentum must be in [0, 1)");
    }
    return MakeSgd(lr, momentum);
  }
  if (name == "adam") return MakeAdam(lr);
  return absl::InvalidArgumentError("--optimizer: unknown optimizer \"" + name +
                                    "\" (known: sgd, adam)");
}

}  // namespace lockstep::trainer
