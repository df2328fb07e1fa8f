#pragma once
// Activation functions, elementwise (softmax over the last axis), as Keras defines them:
// hard_sigmoid is max(0, min(1, 0.2x + 0.5)) in Keras 2 and relu6(x + 3) / 6 in Keras 3; gelu
// is the exact (erf) form unless `approximate`; elu's alpha is 1; leaky_relu's slope is 0.2
// (Keras 3's function; the LeakyReLU layer carries its own).
// Thread-safety: pure functions.

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/kernels/types.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph {

// e^x in float, within 1 ulp of std::exp for every float x in [-87, 88] (checked exhaustively
// once; outside, the bounds' values: about
// 1.2e-38 and 1.65e38), written so that loops over it vectorise (no calls, no branches):
// e^x = 2^n e^r with n = round(x / ln 2), r = x - n ln 2 in two parts, e^r by Cephes's degree-6
// polynomial. std::exp is a scalar call per element; swish, sigmoid and softmax spend most of
// their time in it. Always inlined: a call per element defeats the vectorising, and GCC's
// inliner declines it by itself in a large translation unit (a unity batch), where a profile
// of the attention model put 17% of the step in calls to an out-of-line Exp.
[[gnu::always_inline]] inline float Exp(float x) {
  x = x < -87.0f ? -87.0f : x;  // (std::clamp's references keep GCC from vectorising)
  x = x > 88.0f ? 88.0f : x;
  const float t = x * 1.44269504088896341f;
  const auto n = static_cast<int32_t>(t + std::copysign(0.5f, t));
  const auto nf = static_cast<float>(n);
  float r = x - nf * 0.693359375f;
  r = r + nf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((n + 127) << 23);
}

// 1 / (1 + e^-x), vectorising as Exp does.
[[gnu::always_inline]] inline float Sigmoid(float x) { return 1.0f / (1.0f + Exp(-x)); }

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
