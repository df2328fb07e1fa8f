#include "trainer/kernels/cpu/conv2d.h"

#include <algorithm>

#include "trainer/kernels/cpu/gemm.h"

namespace lockstep::trainer::cpu {
namespace {

struct Dims {
  int64_t n, c, h, w, k, r, s, oh, ow;
};

Dims DimsOf(const Shape& x, const Shape& w, const Conv2dParams& p) {
  Dims d{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0};
  d.oh = d.h + 2 * p.pad - d.r + 1;
  d.ow = d.w + 2 * p.pad - d.s + 1;
  return d;
}

// One image [C, H, W] -> columns [C*R*S, OH*OW].
void Im2Col(const float* img, const Dims& d, int64_t pad, float* col) {
  const int64_t plane = d.oh * d.ow;
  for (int64_t c = 0; c < d.c; ++c) {
    for (int64_t r = 0; r < d.r; ++r) {
      for (int64_t s = 0; s < d.s; ++s) {
        float* out = col + ((c * d.r + r) * d.s + s) * plane;
        for (int64_t y = 0; y < d.oh; ++y) {
          const int64_t iy = y + r - pad;
          if (iy < 0 || iy >= d.h) {
            std::fill(out + y * d.ow, out + (y + 1) * d.ow, 0.0f);
            continue;
          }
          const float* row = img + (c * d.h + iy) * d.w;
          for (int64_t x = 0; x < d.ow; ++x) {
            const int64_t ix = x + s - pad;
            out[y * d.ow + x] = ix >= 0 && ix < d.w ? row[ix] : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: columns added back into an image (which the caller zeroed).
void Col2Im(const float* col, const Dims& d, int64_t pad, float* img) {
  const int64_t plane = d.oh * d.ow;
  for (int64_t c = 0; c < d.c; ++c) {
    for (int64_t r = 0; r < d.r; ++r) {
      for (int64_t s = 0; s < d.s; ++s) {
        const float* in = col + ((c * d.r + r) * d.s + s) * plane;
        for (int64_t y = 0; y < d.oh; ++y) {
          const int64_t iy = y + r - pad;
          if (iy < 0 || iy >= d.h) continue;
          float* row = img + (c * d.h + iy) * d.w;
          for (int64_t x = 0; x < d.ow; ++x) {
            const int64_t ix = x + s - pad;
            if (ix >= 0 && ix < d.w) row[ix] += in[y * d.ow + x];
          }
        }
      }
    }
  }
}

}  // namespace

Shape Conv2dOutputShape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  Dims d = DimsOf(x, w, p);
  return {d.n, d.k, d.oh, d.ow};
}

void Conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                   Tensor* y, std::vector<float>* scratch) {
  const Dims d = DimsOf(x.shape(), w.shape(), p);
  y->Resize({d.n, d.k, d.oh, d.ow});
  const int64_t crs = d.c * d.r * d.s;
  const int64_t plane = d.oh * d.ow;
  scratch->resize(static_cast<size_t>(crs * plane));
  for (int64_t i = 0; i < d.n; ++i) {
    float* out = y->data() + i * d.k * plane;
    for (int64_t k = 0; k < d.k; ++k) std::fill(out + k * plane, out + (k + 1) * plane, b[k]);
    Im2Col(x.data() + i * d.c * d.h * d.w, d, p.pad, scratch->data());
    Gemm(false, false, d.k, plane, crs, 1.0f, w.data(), scratch->data(), 1.0f, out);
  }
}

void Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv2dParams& p,
                    Tensor* dx, Tensor* dw, Tensor* db, std::vector<float>* scratch) {
  const Dims d = DimsOf(x.shape(), w.shape(), p);
  const int64_t crs = d.c * d.r * d.s;
  const int64_t plane = d.oh * d.ow;
  scratch->resize(static_cast<size_t>(crs * plane));
  dw->Resize(w.shape());
  dw->Fill(0.0f);
  db->Resize({d.k});
  db->Fill(0.0f);
  if (dx != nullptr) {
    dx->Resize(x.shape());
    dx->Fill(0.0f);
  }
  for (int64_t i = 0; i < d.n; ++i) {
    const float* g = dy.data() + i * d.k * plane;
    for (int64_t k = 0; k < d.k; ++k) {
      float sum = 0.0f;
      for (int64_t j = 0; j < plane; ++j) sum += g[k * plane + j];
      (*db)[k] += sum;
    }
    Im2Col(x.data() + i * d.c * d.h * d.w, d, p.pad, scratch->data());
    // dW += dY_i [K, plane] x col^T [plane, CRS]
    Gemm(false, true, d.k, crs, plane, 1.0f, g, scratch->data(), 1.0f, dw->data());
    if (dx != nullptr) {
      // dcol = W^T [CRS, K] x dY_i [K, plane]
      Gemm(true, false, crs, plane, d.k, 1.0f, w.data(), g, 0.0f, scratch->data());
      Col2Im(scratch->data(), d, p.pad, dx->data() + i * d.c * d.h * d.w);
    }
  }
}

}  // namespace lockstep::trainer::cpu
