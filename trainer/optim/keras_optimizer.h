#pragma once
// Optimizers as a Keras compile config states them, with Keras 3's update rules:
//   SGD       m = momentum * m - lr * g; p += m (Nesterov: p += momentum * m - lr * g)
//   Adam      m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2);
//             p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)  (amsgrad: max v)
//   AdamW     Adam after p -= lr * weight_decay * p
//   RMSprop   v = rho v + (1 - rho) g^2; inc = lr g / sqrt(v + eps) (centered: v - a^2 + eps);
//             with momentum: m = momentum m + inc, p -= m; else p -= inc
//   Adagrad   a += g^2 (a starts at initial_accumulator_value); p -= lr g / sqrt(a + eps)
// and, before any rule, Keras's gradient clipping (clipvalue per element, clipnorm per tensor,
// global_clipnorm over all of them) and decoupled weight_decay for every optimizer. The
// update loops are single passes over each tensor, vectorised, with no allocation per step.
// Thread-safety: one thread per optimizer.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer {

struct KerasOptimizerOptions {
  std::string kind = "adam";  // sgd, adam, adamw, rmsprop, adagrad
  float learning_rate = 0.001f;
  float momentum = 0;
  bool nesterov = false;
  float beta_1 = 0.9f, beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool amsgrad = false;
  float rho = 0.9f;
  bool centered = false;
  float initial_accumulator_value = 0.1f;
  float weight_decay = 0;
  float clipnorm = 0, global_clipnorm = 0, clipvalue = 0;
  nlohmann::json schedule;  // a LearningRateSchedule object, or null
};

// "adam", {"class_name": "Adam", "config": {...}} (Keras 2 and 3), TF.js's "Custom>Adam":
// InvalidArgument names an optimizer class or option that is not supported.
absl::StatusOr<KerasOptimizerOptions> ParseKerasOptimizer(const nlohmann::json& v);
std::unique_ptr<Optimizer> MakeKerasOptimizer(const KerasOptimizerOptions& o);

// A Keras LearningRateSchedule at `step`: ExponentialDecay (initial_learning_rate, decay_steps,
// decay_rate, staircase), CosineDecay (initial_learning_rate, decay_steps, alpha,
// warmup_target, warmup_steps), PiecewiseConstantDecay (boundaries, values).
absl::Status CheckKerasSchedule(const nlohmann::json& schedule);
float KerasScheduleAt(const nlohmann::json& schedule, int64_t step);

}  // namespace lockstep::trainer
