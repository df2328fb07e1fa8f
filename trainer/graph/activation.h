#pragma once
// Activation functions, elementwise (softmax over the last axis), as Keras defines them:
// hard_sigmoid is max(0, min(1, 0.2x + 0.5)) in Keras 2 and relu6(x + 3) / 6 in Keras 3; gelu
// is the exact (erf) form unless `approximate`; elu's alpha is 1; leaky_relu's slope is 0.2
// (Keras 3's function; the LeakyReLU layer carries its own).
// Thread-safety: pure functions.

#include <string>

#include "absl/status/statusor.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph {

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

// A Keras activation name ("relu", "swish", "gelu"...). `keras3` picks hard_sigmoid's form.
// InvalidArgument "activation \"x\" is not supported (supported: ...)".
absl::StatusOr<Activation> ParseActivation(const std::string& name, bool keras3);
std::string ActivationName(const Activation& a);

// y = f(z), same shape (y may alias z except for softmax).
void ActivationForward(const Activation& a, const Tensor& z, Tensor* y);
// dz = f'(z) * dy from the saved z and y (softmax: the row's Jacobian).
void ActivationBackward(const Activation& a, const Tensor& z, const Tensor& y, const Tensor& dy,
                        Tensor* dz);

}  // namespace lockstep::trainer::graph
