#pragma once
// The activations element by element on the device (every one but softmax, which works on
// rows): what activation.cu's kernels and the recurrent cells (recurrent.cu) apply.

#include "trainer/kernels/types.h"

namespace lockstep::trainer::cuda::act {

inline constexpr float kSeluAlpha = 1.6732632423543772f;
inline constexpr float kSeluScale = 1.0507009873554805f;
inline constexpr float kSqrt2OverPi = 0.7978845608028654f;

__device__ __forceinline__ float Sig(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float Clamp(float x, float lo, float hi) {
  return fminf(fmaxf(x, lo), hi);
}

// One element of each activation but softmax, as activation.cc computes it: y = f(z), and
// dL/dz from z, y and g = dL/dy.
__device__ __forceinline__ float ActForward(Act k, float alpha, float z) {
  switch (k) {
    case Act::kLinear:
      return z;
    case Act::kRelu:
      return fmaxf(z, 0.0f);
    case Act::kRelu6:
      return Clamp(z, 0.0f, 6.0f);
    case Act::kSigmoid:
      return Sig(z);
    case Act::kHardSigmoid2:
      return Clamp(0.2f * z + 0.5f, 0.0f, 1.0f);
    case Act::kHardSigmoid3:
      return Clamp(z / 6.0f + 0.5f, 0.0f, 1.0f);
    case Act::kTanh:
      return tanhf(z);
    case Act::kSwish:
      return z * Sig(z);
    case Act::kGelu:
      return 0.5f * z * (1.0f + erff(z * 0.7071067811865476f));
    case Act::kGeluTanh:
      return 0.5f * z * (1.0f + tanhf(kSqrt2OverPi * (z + 0.044715f * z * z * z)));
    case Act::kElu:
      return z > 0 ? z : alpha * expm1f(z);
    case Act::kSelu:
      return kSeluScale * (z > 0 ? z : kSeluAlpha * expm1f(z));
    case Act::kSoftplus:
      return Softplus(z);
    case Act::kSoftsign:
      return z / (1.0f + fabsf(z));
    case Act::kExponential:
      return expf(z);
    case Act::kLeakyRelu:
      return z > 0 ? z : alpha * z;
    case Act::kHardSwish:
      return z * Clamp(z / 6.0f + 0.5f, 0.0f, 1.0f);
    case Act::kMish:
      return z * tanhf(Softplus(z));
    case Act::kSoftmax:
      break;  // rows: SoftmaxForward
  }
  return z;
}

__device__ __forceinline__ float ActBackward(Act k, float alpha, float z, float y, float g) {
  switch (k) {
    case Act::kLinear:
      return g;
    case Act::kRelu:
      return z > 0 ? g : 0.0f;
    case Act::kRelu6:
      return (z > 0 && z < 6) ? g : 0.0f;
    case Act::kSigmoid:
      return g * y * (1.0f - y);
    case Act::kHardSigmoid2: {
      const float t = 0.2f * z + 0.5f;
      return (t > 0 && t < 1) ? 0.2f * g : 0.0f;
    }
    case Act::kHardSigmoid3: {
      const float t = z / 6.0f + 0.5f;
      return (t > 0 && t < 1) ? g / 6.0f : 0.0f;
    }
    case Act::kTanh:
      return g * (1.0f - y * y);
    case Act::kSwish: {
      const float s = Sig(z);
      return g * (s + z * s * (1.0f - s));
    }
    case Act::kGelu: {
      const float cdf = 0.5f * (1.0f + erff(z * 0.7071067811865476f));
      const float pdf = 0.3989422804014327f * expf(-0.5f * z * z);
      return g * (cdf + z * pdf);
    }
    case Act::kGeluTanh: {
      const float u = kSqrt2OverPi * (z + 0.044715f * z * z * z);
      const float t = tanhf(u);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * z * z);
      return g * (0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * du);
    }
    case Act::kElu:
      return z > 0 ? g : g * (y + alpha);
    case Act::kSelu:
      return z > 0 ? g * kSeluScale : g * (y + kSeluScale * kSeluAlpha);
    case Act::kSoftplus:
      return g * Sig(z);
    case Act::kSoftsign: {
      const float q = 1.0f + fabsf(z);
      return g / (q * q);
    }
    case Act::kExponential:
      return g * y;
    case Act::kLeakyRelu:
      return z > 0 ? g : alpha * g;
    case Act::kHardSwish:
      return z < -3 ? 0.0f : z > 3 ? g : g * (z / 3.0f + 0.5f);
    case Act::kMish: {
      const float t = tanhf(Softplus(z));
      return g * (t + z * (1.0f - t * t) * Sig(z));
    }
    case Act::kSoftmax:
      break;  // rows: SoftmaxBackward
  }
  return g;
}

}  // namespace lockstep::trainer::cuda::act
