#include "trainer/graph/activation.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "trainer/kernels/cpu/simd.h"
#include "trainer/kernels/cpu/threads.h"

namespace lockstep::trainer::graph {
namespace {

constexpr float kSeluAlpha = 1.6732632423543772f;
constexpr float kSeluScale = 1.0507009873554805f;
constexpr float kSqrt2OverPi = 0.7978845608028654f;

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

const std::vector<std::pair<std::string, Act>>& Names() {
  static const auto* names = new std::vector<std::pair<std::string, Act>>{
      {"linear", Act::kLinear},
      {"relu", Act::kRelu},
      {"relu6", Act::kRelu6},
      {"sigmoid", Act::kSigmoid},
      {"hard_sigmoid", Act::kHardSigmoid2},
      {"tanh", Act::kTanh},
      {"softmax", Act::kSoftmax},
      {"swish", Act::kSwish},
      {"silu", Act::kSwish},
      {"gelu", Act::kGelu},
      {"elu", Act::kElu},
      {"selu", Act::kSelu},
      {"softplus", Act::kSoftplus},
      {"softsign", Act::kSoftsign},
      {"exponential", Act::kExponential},
      {"leaky_relu", Act::kLeakyRelu},
      {"hard_swish", Act::kHardSwish},
      {"hard_silu", Act::kHardSwish},
      {"mish", Act::kMish},
  };
  return *names;
}

}  // namespace

absl::StatusOr<Activation> ParseActivation(const std::string& name, bool keras3) {
  if (name.empty() || name == "None") return Activation{Act::kLinear, 0};
  for (const auto& [n, a] : Names()) {
    if (n != name) continue;
    Activation out{a, 0};
    if (a == Act::kHardSigmoid2 && keras3) out.kind = Act::kHardSigmoid3;
    if (a == Act::kElu) out.alpha = 1.0f;
    if (a == Act::kLeakyRelu) out.alpha = 0.2f;
    return out;
  }
  std::string known;
  for (const auto& [n, a] : Names()) known += (known.empty() ? "" : ", ") + n;
  return absl::InvalidArgumentError("activation \"" + name +
                                    "\" is not supported (supported: " + known + ")");
}

std::string ActivationName(const Activation& a) {
  if (a.kind == Act::kHardSigmoid3) return "hard_sigmoid";
  if (a.kind == Act::kGeluTanh) return "gelu";
  for (const auto& [n, k] : Names()) {
    if (k == a.kind) return n;
  }
  return "?";
}

namespace {

// f over n elements (softmax: over rows of c), the range one thread takes.
LOCKSTEP_SIMD_CLONES void ForwardSpan(const Activation& a, const float* in, float* out, int64_t n,
                                      int64_t c) {
  switch (a.kind) {
    case Act::kLinear:
      if (out != in) std::copy_n(in, n, out);
      return;
    case Act::kRelu:
      for (int64_t i = 0; i < n; ++i) out[i] = std::max(in[i], 0.0f);
      return;
    case Act::kRelu6:
      for (int64_t i = 0; i < n; ++i) out[i] = std::clamp(in[i], 0.0f, 6.0f);
      return;
    case Act::kSigmoid:
      for (int64_t i = 0; i < n; ++i) out[i] = Sigmoid(in[i]);
      return;
    case Act::kHardSigmoid2:
      for (int64_t i = 0; i < n; ++i) out[i] = std::clamp(0.2f * in[i] + 0.5f, 0.0f, 1.0f);
      return;
    case Act::kHardSigmoid3:
      for (int64_t i = 0; i < n; ++i) out[i] = std::clamp(in[i] / 6.0f + 0.5f, 0.0f, 1.0f);
      return;
    case Act::kTanh:
      for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
      return;
    case Act::kSoftmax: {
      for (int64_t r = 0; r < n / c; ++r) {
        const float* zr = in + r * c;
        float* yr = out + r * c;
        const float m = *std::max_element(zr, zr + c);
        float sum = 0;
        for (int64_t j = 0; j < c; ++j) sum += (yr[j] = Exp(zr[j] - m));
        for (int64_t j = 0; j < c; ++j) yr[j] /= sum;
      }
      return;
    }
    case Act::kSwish:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] * Sigmoid(in[i]);
      return;
    case Act::kGelu:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * 0.7071067811865476f));
      }
      return;
    case Act::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const float x = in[i];
        out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
      }
      return;
    case Act::kElu:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = in[i] > 0 ? in[i] : a.alpha * std::expm1(in[i]);
      }
      return;
    case Act::kSelu:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = kSeluScale * (in[i] > 0 ? in[i] : kSeluAlpha * std::expm1(in[i]));
      }
      return;
    case Act::kSoftplus:
      for (int64_t i = 0; i < n; ++i) out[i] = Softplus(in[i]);
      return;
    case Act::kSoftsign:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] / (1.0f + std::abs(in[i]));
      return;
    case Act::kExponential:
      for (int64_t i = 0; i < n; ++i) out[i] = Exp(in[i]);
      return;
    case Act::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0 ? in[i] : a.alpha * in[i];
      return;
    case Act::kHardSwish:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = in[i] * std::clamp(in[i] / 6.0f + 0.5f, 0.0f, 1.0f);
      }
      return;
    case Act::kMish:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] * std::tanh(Softplus(in[i]));
      return;
  }
}

// f'(z) * dy over n elements (softmax: over rows of c), the range one thread takes.
LOCKSTEP_SIMD_CLONES void BackwardSpan(const Activation& a, const float* zi, const float* yi,
                                       const float* g, float* d, int64_t n, int64_t c) {
  switch (a.kind) {
    case Act::kLinear:
      if (d != g) std::copy_n(g, n, d);
      return;
    case Act::kRelu:
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];  // read unconditionally, so the loop vectorises
        d[i] = zi[i] > 0 ? gi : 0.0f;
      }
      return;
    case Act::kRelu6:
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        d[i] = (zi[i] > 0 && zi[i] < 6) ? gi : 0.0f;
      }
      return;
    case Act::kSigmoid:
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * yi[i] * (1.0f - yi[i]);
      return;
    case Act::kHardSigmoid2:
      for (int64_t i = 0; i < n; ++i) {
        const float t = 0.2f * zi[i] + 0.5f;
        const float gi = g[i];
        d[i] = (t > 0 && t < 1) ? 0.2f * gi : 0.0f;
      }
      return;
    case Act::kHardSigmoid3:
      for (int64_t i = 0; i < n; ++i) {
        const float t = zi[i] / 6.0f + 0.5f;
        const float gi = g[i];
        d[i] = (t > 0 && t < 1) ? gi / 6.0f : 0.0f;
      }
      return;
    case Act::kTanh:
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * (1.0f - yi[i] * yi[i]);
      return;
    case Act::kSoftmax: {
      for (int64_t r = 0; r < n / c; ++r) {
        const float* yr = yi + r * c;
        const float* gr = g + r * c;
        float dot = 0;
        for (int64_t j = 0; j < c; ++j) dot += yr[j] * gr[j];
        for (int64_t j = 0; j < c; ++j) d[r * c + j] = yr[j] * (gr[j] - dot);
      }
      return;
    }
    case Act::kSwish:
      for (int64_t i = 0; i < n; ++i) {
        const float s = Sigmoid(zi[i]);
        d[i] = g[i] * (s + zi[i] * s * (1.0f - s));
      }
      return;
    case Act::kGelu:
      for (int64_t i = 0; i < n; ++i) {
        const float x = zi[i];
        const float cdf = 0.5f * (1.0f + std::erf(x * 0.7071067811865476f));
        const float pdf = 0.3989422804014327f * std::exp(-0.5f * x * x);
        d[i] = g[i] * (cdf + x * pdf);
      }
      return;
    case Act::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const float x = zi[i];
        const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
        const float t = std::tanh(u);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
        d[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
      }
      return;
    case Act::kElu:
      for (int64_t i = 0; i < n; ++i) d[i] = zi[i] > 0 ? g[i] : g[i] * (yi[i] + a.alpha);
      return;
    case Act::kSelu:
      for (int64_t i = 0; i < n; ++i) {
        d[i] = zi[i] > 0 ? g[i] * kSeluScale : g[i] * (yi[i] + kSeluScale * kSeluAlpha);
      }
      return;
    case Act::kSoftplus:
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * Sigmoid(zi[i]);
      return;
    case Act::kSoftsign:
      for (int64_t i = 0; i < n; ++i) {
        const float q = 1.0f + std::abs(zi[i]);
        d[i] = g[i] / (q * q);
      }
      return;
    case Act::kExponential:
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * yi[i];
      return;
    case Act::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) d[i] = zi[i] > 0 ? g[i] : a.alpha * g[i];
      return;
    case Act::kHardSwish:
      for (int64_t i = 0; i < n; ++i) {
        const float x = zi[i];
        const float gi = g[i];
        d[i] = x < -3 ? 0.0f : x > 3 ? gi : gi * (x / 3.0f + 0.5f);
      }
      return;
    case Act::kMish:
      for (int64_t i = 0; i < n; ++i) {
        const float x = zi[i];
        const float sp = Softplus(x);
        const float t = std::tanh(sp);
        d[i] = g[i] * (t + x * (1.0f - t * t) * Sigmoid(x));
      }
      return;
  }
}

// Element operations per value, for splitting over the kernels' threads: the exp-based forms
// cost tens, a clamp one.
int64_t Cost(const Activation& a) {
  switch (a.kind) {
    case Act::kLinear:
    case Act::kRelu:
    case Act::kRelu6:
    case Act::kLeakyRelu:
    case Act::kHardSigmoid2:
    case Act::kHardSigmoid3:
    case Act::kHardSwish:
    case Act::kSoftsign:
      return 2;
    default:
      return 24;
  }
}

// Runs f(begin, count) over the rows of z (softmax's rows of its last axis; otherwise single
// elements) split over the kernels' threads.
template <typename F>
void OverRows(const Activation& a, const Tensor& z, F f) {
  const int64_t n = z.size();
  if (n == 0) return;
  const int64_t c = a.kind == Act::kSoftmax && !z.shape().empty() ? z.shape().back() : 1;
  cpu::ParallelFor(n / c, c * Cost(a), [&](int64_t b, int64_t e) { f(b * c, (e - b) * c, c); });
}

}  // namespace

void ActivationForward(const Activation& a, const Tensor& z, Tensor* y) {
  y->Resize(z.shape());
  const float* in = z.data();
  float* out = y->data();
  OverRows(a, z,
           [&](int64_t at, int64_t n, int64_t c) { ForwardSpan(a, in + at, out + at, n, c); });
}

void ActivationBackward(const Activation& a, const Tensor& z, const Tensor& y, const Tensor& dy,
                        Tensor* dz) {
  dz->Resize(z.shape());
  const float* zi = z.data();
  const float* yi = y.data();
  const float* g = dy.data();
  float* d = dz->data();
  OverRows(a, z, [&](int64_t at, int64_t n, int64_t c) {
    BackwardSpan(a, zi + at, yi + at, g + at, d + at, n, c);
  });
}

}  // namespace lockstep::trainer::graph
