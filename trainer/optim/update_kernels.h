#pragma once
// The optimizers' element loops: one pass over a tensor's parameters, gradient and slots per
// step, for every rule the optimizers implement (optimizer.cc: the trainer's PyTorch-style SGD
// and Adam; keras_optimizer.cc: Keras's). Each loop is compiled for each vector width
// (kernels/cpu/simd.h) and, over large tensors, split across the kernels' threads
// (kernels/cpu/threads.h), so the update runs at memory speed instead of at the speed of
// scalar square roots and divisions.
// Thread-safety: reentrant.

#include <cstdint>

namespace lockstep::trainer {

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

// Updates p[0, n) from g with the rule's slots s0..s2 (null where the rule has fewer).
void ApplyUpdate(const UpdateParams& u, float* p, const float* g, float* s0, float* s1, float* s2,
                 int64_t n);

}  // namespace lockstep::trainer
