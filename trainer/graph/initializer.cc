#include "trainer/graph/initializer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trainer/graph/memory.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

void Fans(const Shape& s, double* fan_in, double* fan_out) {
  if (s.empty()) {
    *fan_in = *fan_out = 1;
  } else if (s.size() == 1) {
    *fan_in = *fan_out = static_cast<double>(s[0]);
  } else {
    double receptive = 1;
    for (size_t i = 0; i + 2 < s.size(); ++i) receptive *= static_cast<double>(s[i]);
    *fan_in = static_cast<double>(s[s.size() - 2]) * receptive;
    *fan_out = static_cast<double>(s.back()) * receptive;
  }
}

// Normal draws cut at two deviations, redrawn until inside (as TensorFlow's truncated_normal).
float TruncatedNormal(std::mt19937_64& g, float mean, float stddev) {
  NormalDraw<float> d(0.0f, 1.0f);
  for (;;) {
    const float v = d(g);
    if (std::abs(v) <= 2.0f) return mean + stddev * v;
  }
}

void Orthogonal(Tensor* t, float gain, std::mt19937_64& g) {
  const Shape& s = t->shape();
  const int64_t cols = s.empty() ? 1 : s.back();
  const int64_t rows = t->size() / std::max<int64_t>(cols, 1);
  // Orthonormalises `small` normal vectors of length `big` (modified Gram-Schmidt, each
  // vector contiguous): the columns of Q in a QR of a normal [big, small] matrix, with R's
  // diagonal signs folded in as Keras does, so the result is uniform over orthogonal ones.
  const int64_t big = std::max(rows, cols), small = std::min(rows, cols);
  std::vector<double> q(static_cast<size_t>(big * small));  // vector j at [j * big, (j+1) * big)
  NormalDraw<double> nd(0.0, 1.0);
  for (double& v : q) v = nd(g);
  for (int64_t j = 0; j < small; ++j) {
    double* vj = q.data() + j * big;
    for (int64_t k = 0; k < j; ++k) {
      const double* vk = q.data() + k * big;
      double dot = 0;
      for (int64_t i = 0; i < big; ++i) dot += vj[i] * vk[i];
      for (int64_t i = 0; i < big; ++i) vj[i] -= dot * vk[i];
    }
    double norm = 0;
    for (int64_t i = 0; i < big; ++i) norm += vj[i] * vj[i];
    norm = std::sqrt(std::max(norm, 1e-30));
    for (int64_t i = 0; i < big; ++i) vj[i] /= norm;
  }
  // The weight is Q [big, small] when rows >= cols, else its transpose: element (r, c) is
  // vector c's entry r, or vector r's entry c.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double v = rows >= cols ? q[c * big + r] : q[r * big + c];
      (*t)[r * cols + c] = static_cast<float>(gain * v);
    }
  }
}

}  // namespace

Initializer Zeros() { return {}; }
Initializer Ones() {
  Initializer i;
  i.kind = Initializer::Kind::kOnes;
  return i;
}
Initializer GlorotUniform() {
  Initializer i;
  i.kind = Initializer::Kind::kVarianceScaling;
  i.mode = Initializer::Mode::kFanAvg;
  i.distribution = Initializer::Distribution::kUniform;
  return i;
}

Initializer RandomUniform(float lo, float hi) {
  Initializer i;
  i.kind = Initializer::Kind::kRandomUniform;
  i.minval = lo;
  i.maxval = hi;
  return i;
}

Initializer Orthogonal(float gain) {
  Initializer i;
  i.kind = Initializer::Kind::kOrthogonal;
  i.value = gain;
  return i;
}

Tensor Initialize(const Initializer& init, const Shape& shape, std::mt19937_64* rng) {
  // The weight and its gradient, checked before either is allocated (a count that overflows
  // is too large too). Only a large one asks the system: a model's hundreds of small weights
  // need not read /proc each (the step estimate covers their sum).
  double count = 1;
  for (int64_t d : shape) count *= static_cast<double>(d);
  const double bytes = 2.0 * count * static_cast<double>(sizeof(float));
  constexpr double kAsk = 64.0 * 1024 * 1024;
  const int64_t available = bytes < kAsk ? -1 : AvailableMemoryBytes();
  if (available >= 0 && bytes > static_cast<double>(available)) {
    throw WeightTooLarge("a weight of shape " + ShapeString(shape) + " needs " + Bytes(bytes) +
                         " with its gradient; this machine has " +
                         Bytes(static_cast<double>(available)) + " available");
  }
  std::mt19937_64 own(static_cast<uint64_t>(init.seed.value_or(0)) * 0x9E3779B97F4A7C15ull + 17);
  std::mt19937_64& g = init.seed ? own : *rng;
  Tensor t(shape);
  using K = Initializer::Kind;
  switch (init.kind) {
    case K::kZeros:
      break;
    case K::kOnes:
      t.Fill(1.0f);
      break;
    case K::kConstant:
      t.Fill(init.value);
      break;
    case K::kRandomNormal: {
      NormalDraw<float> d(init.mean, init.stddev);
      for (float& v : t.values()) v = d(g);
      break;
    }
    case K::kRandomUniform: {
      UniformDraw<float> d(init.minval, init.maxval);
      for (float& v : t.values()) v = d(g);
      break;
    }
    case K::kTruncatedNormal:
      for (float& v : t.values()) v = TruncatedNormal(g, init.mean, init.stddev);
      break;
    case K::kVarianceScaling: {
      double fan_in = 1, fan_out = 1;
      Fans(shape, &fan_in, &fan_out);
      const double n = init.mode == Initializer::Mode::kFanIn    ? fan_in
                       : init.mode == Initializer::Mode::kFanOut ? fan_out
                                                                 : (fan_in + fan_out) / 2;
      const double var = init.scale / std::max(1.0, n);
      if (init.distribution == Initializer::Distribution::kUniform) {
        const auto limit = static_cast<float>(std::sqrt(3.0 * var));
        UniformDraw<float> d(-limit, limit);
        for (float& v : t.values()) v = d(g);
      } else if (init.distribution == Initializer::Distribution::kUntruncatedNormal) {
        NormalDraw<float> d(0.0f, static_cast<float>(std::sqrt(var)));
        for (float& v : t.values()) v = d(g);
      } else {
        // The deviation of a standard normal cut at two deviations is 0.8796: undo it.
        const auto sd = static_cast<float>(std::sqrt(var) / 0.87962566103423978);
        for (float& v : t.values()) v = TruncatedNormal(g, 0.0f, sd);
      }
      break;
    }
    case K::kOrthogonal:
      Orthogonal(&t, init.value == 0 ? 1.0f : init.value, g);
      break;
    case K::kIdentity: {
      const int64_t cols = shape.empty() ? 1 : shape.back();
      const int64_t rows = t.size() / std::max<int64_t>(cols, 1);
      for (int64_t i = 0; i < std::min(rows, cols); ++i) {
        t[i * cols + i] = init.value == 0 ? 1.0f : init.value;
      }
      break;
    }
  }
  return t;
}

}  // namespace lockstep::trainer::graph
