#pragma once
// The recurrent cells' gate activations (rnn.cc): activations over column blocks of row-major
// matrices (a gate's columns of [batch, G*units]), and column copies.
// Thread-safety: one thread per object.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "trainer/graph/activation.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph {

// The common gate functions run in place; the others go through ActivationForward/Backward on
// a contiguous copy, so every Keras activation works.

inline float SigmoidF(float x) { return 1.0f / (1.0f + std::exp(-x)); }

class BlockActivation {
 public:
  // y[r, c0 + j] = f(z[r, c0 + j]) for r < rows, j < n; rows are `ld` apart.
  void Forward(const Activation& a, const float* z, float* y, int64_t rows, int64_t ld, int64_t c0,
               int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* zi = z + r * ld + c0;
      float* yi = y + r * ld + c0;
      switch (a.kind) {
        case Act::kLinear:
          std::copy_n(zi, n, yi);
          continue;
        case Act::kTanh:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::tanh(zi[j]);
          continue;
        case Act::kSigmoid:
          for (int64_t j = 0; j < n; ++j) yi[j] = SigmoidF(zi[j]);
          continue;
        case Act::kHardSigmoid2:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::clamp(0.2f * zi[j] + 0.5f, 0.0f, 1.0f);
          continue;
        case Act::kHardSigmoid3:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::clamp(zi[j] / 6.0f + 0.5f, 0.0f, 1.0f);
          continue;
        case Act::kRelu:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::max(zi[j], 0.0f);
          continue;
        default:
          break;
      }
      Generic(a, z, y, rows, ld, c0, n);
      return;
    }
  }

  // dz = f'(z) * dy over the same block (dz may be dy).
  void Backward(const Activation& a, const float* z, const float* y, const float* dy, float* dz,
                int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * ld + c0;
      const float* zi = z + o;
      const float* yi = y + o;
      const float* g = dy + o;
      float* d = dz + o;
      switch (a.kind) {
        case Act::kLinear:
          if (d != g) std::copy_n(g, n, d);
          continue;
        case Act::kTanh:
          for (int64_t j = 0; j < n; ++j) d[j] = g[j] * (1.0f - yi[j] * yi[j]);
          continue;
        case Act::kSigmoid:
          for (int64_t j = 0; j < n; ++j) d[j] = g[j] * yi[j] * (1.0f - yi[j]);
          continue;
        case Act::kHardSigmoid2:
          for (int64_t j = 0; j < n; ++j) {
            const float t = 0.2f * zi[j] + 0.5f;
            d[j] = (t > 0 && t < 1) ? 0.2f * g[j] : 0.0f;
          }
          continue;
        case Act::kHardSigmoid3:
          for (int64_t j = 0; j < n; ++j) {
            const float t = zi[j] / 6.0f + 0.5f;
            d[j] = (t > 0 && t < 1) ? g[j] / 6.0f : 0.0f;
          }
          continue;
        case Act::kRelu:
          for (int64_t j = 0; j < n; ++j) d[j] = zi[j] > 0 ? g[j] : 0.0f;
          continue;
        default:
          break;
      }
      GenericBackward(a, z, y, dy, dz, rows, ld, c0, n);
      return;
    }
  }

 private:
  void Gather(const float* src, Tensor* dst, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    dst->Resize({rows, n});
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * ld + c0, n, dst->data() + r * n);
  }
  void Scatter(const Tensor& src, float* dst, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src.data() + r * n, n, dst + r * ld + c0);
  }
  void Generic(const Activation& a, const float* z, float* y, int64_t rows, int64_t ld, int64_t c0,
               int64_t n) {
    Gather(z, &z_, rows, ld, c0, n);
    ActivationForward(a, z_, &y_);
    Scatter(y_, y, rows, ld, c0, n);
  }
  void GenericBackward(const Activation& a, const float* z, const float* y, const float* dy,
                       float* dz, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    Gather(z, &z_, rows, ld, c0, n);
    Gather(y, &y_, rows, ld, c0, n);
    Gather(dy, &dy_, rows, ld, c0, n);
    ActivationBackward(a, z_, y_, dy_, &dz_);
    Scatter(dz_, dz, rows, ld, c0, n);
  }

  Tensor z_, y_, dy_, dz_;
};

// Columns [c0, c0 + n) of a [rows, ld] matrix into a contiguous [rows, n] one, and back
// (added).
inline void CopyCols(const float* src, int64_t rows, int64_t ld, int64_t c0, int64_t n,
                     float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * ld + c0, n, dst + r * n);
}
inline void AddCols(const float* src, int64_t rows, int64_t ld, int64_t c0, int64_t n, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * n;
    float* d = dst + r * ld + c0;
    for (int64_t j = 0; j < n; ++j) d[j] += s[j];
  }
}

}  // namespace lockstep::trainer::graph
