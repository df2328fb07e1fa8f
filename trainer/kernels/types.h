#pragma once
// The vocabulary the kernels share with the layers and optimizers above them: which activation,
// which loss, which optimizer update rule. Plain types only: the CPU and CUDA kernels
// (trainer/kernels/) and the graph, layers and optimizers (trainer/graph/, trainer/optim/) all
// include this header, and nothing in trainer/kernels/ includes those above it.
// Thread-safety: plain values.

#include <cstdint>

namespace lockstep::trainer {

// Activation functions as Keras defines them (graph/activation.h parses and computes them).
enum class Act {
  kLinear,
  kRelu,
  kRelu6,
  kSigmoid,
  kHardSigmoid2,
  kHardSigmoid3,
  kTanh,
  kSoftmax,
  kSwish,
  kGelu,
  kGeluTanh,
  kElu,
  kSelu,
  kSoftplus,
  kSoftsign,
  kExponential,
  kLeakyRelu,
  kHardSwish,
  kMish,
};

struct Activation {
  Act kind = Act::kLinear;
  float alpha = 0;  // LeakyReLU's slope, ELU's alpha (layers)
};

// Keras's losses (graph/loss.h parses and computes them).
enum class LossKind {
  kCategoricalCrossentropy,        // one-hot targets of the output's shape
  kSparseCategoricalCrossentropy,  // class ids: the output's shape without its last axis
  kBinaryCrossentropy,
  kMeanSquaredError,
  kMeanAbsoluteError,
  kHuber,
};

struct Loss {
  LossKind kind = LossKind::kSparseCategoricalCrossentropy;
  bool from_logits = false;
  float label_smoothing = 0;
  float delta = 1;  // Huber
};

// The elementwise merges (Add, Subtract, Multiply, Average, Maximum, Minimum) and comparisons
// (Keras 3's Equal, NotEqual, Greater...) of layers/merging/ and layers/masking/, and the
// recurrent cells of layers/rnn/rnn.h.
enum class MergeOp { kAdd, kSubtract, kMultiply, kAverage, kMaximum, kMinimum };
enum class CompareOp { kEqual, kNotEqual, kGreater, kGreaterEqual, kLess, kLessEqual };
enum class RnnCell { kSimpleRnn, kLstm, kGru };

// The optimizers' update rules (kernels/cpu/update.h applies them on the CPU,
// kernels/cuda/optimizer_kernels.h on a GPU).
enum class UpdateRule {
  kTorchSgd,       // v = mu v + g; p -= lr v (mu 0: p -= lr g, no slot)
  kTorchAdam,      // s0 = b1 s0 + a1 g; s1 = b2 s1 + a2 g^2; p -= alpha s0 / (sqrt(s1) + eps)
  kKerasSgd,       // p -= lr g
  kKerasMomentum,  // s0 = mu s0 - lr g; p += s0
  kKerasNesterov,  // s0 = mu s0 - lr g; p += mu s0 - lr g
  kKerasAdam,      // s0 += (g - s0) a1; s1 += (g^2 - s1) a2; p -= alpha s0 / (sqrt(s1) + eps)
  kKerasAmsgrad,   // as Adam, with s2 = max(s2, s1) in the denominator
  kKerasRmsprop,   // s0 = rho s0 + (1 - rho) g^2; p -= lr g / sqrt(s0 + eps)
  kKerasRmspropMomentum,          // ... s1 = mu s1 + lr g / sqrt(...); p -= s1
  kKerasRmspropCentered,          // ... s1 = rho s1 + (1 - rho) g; denominator minus s1^2
  kKerasRmspropCenteredMomentum,  // momentum s1, mean s2
  kKerasAdagrad,                  // s0 += g^2; p -= lr g / sqrt(s0 + eps)
};

struct UpdateParams {
  UpdateRule rule = UpdateRule::kKerasSgd;
  float lr = 0;
  float momentum = 0;          // mu
  float alpha = 0;             // Adam's bias-corrected step size
  float beta1 = 0, beta2 = 0;  // Adam's
  float a1 = 0, a2 = 0;        // 1 - beta_1, 1 - beta_2
  float rho = 0;
  float eps = 0;
  float keep = 1;   // decoupled weight decay: p *= keep before the rule (1: none)
  float scale = 1;  // the gradient is read as clip(g * scale, -clip, clip)
  float clip = 3.4e38f;
};

}  // namespace lockstep::trainer
