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

// One image [C, H, W] -> its columns of the batch matrix [C*R*S, ld], starting at `col`.
void Im2Col(const float* img, const Dims& d, int64_t pad, int64_t ld, float* col) {
  for (int64_t c = 0; c < d.c; ++c) {
    for (int64_t r = 0; r < d.r; ++r) {
      for (int64_t s = 0; s < d.s; ++s) {
        float* out = col + ((c * d.r + r) * d.s + s) * ld;
        for (int64_t y = 0; y < d.oh; ++y) {
          const int64_t iy = y + r - pad;
          float* o = out + y * d.ow;
          if (iy < 0 || iy >= d.h) {
            std::fill(o, o + d.ow, 0.0f);
            continue;
          }
          const float* row = img + (c * d.h + iy) * d.w;
          for (int64_t x = 0; x < d.ow; ++x) {
            const int64_t ix = x + s - pad;
            o[x] = ix >= 0 && ix < d.w ? row[ix] : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: one image's columns added back into the image (zeroed by the caller).
void Col2Im(const float* col, const Dims& d, int64_t pad, int64_t ld, float* img) {
  for (int64_t c = 0; c < d.c; ++c) {
    for (int64_t r = 0; r < d.r; ++r) {
      for (int64_t s = 0; s < d.s; ++s) {
        const float* in = col + ((c * d.r + r) * d.s + s) * ld;
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
                   Tensor* y, Conv2dWorkspace* ws) {
  const Dims d = DimsOf(x.shape(), w.shape(), p);
  const int64_t crs = d.c * d.r * d.s;
  const int64_t plane = d.oh * d.ow;
  const int64_t ld = d.n * plane;
  ws->col.resize(static_cast<size_t>(crs * ld));
  ws->out.resize(static_cast<size_t>(d.k * ld));
  for (int64_t i = 0; i < d.n; ++i) {
    Im2Col(x.data() + i * d.c * d.h * d.w, d, p.pad, ld, ws->col.data() + i * plane);
  }
  Gemm(false, false, d.k, ld, crs, 1.0f, w.data(), ws->col.data(), 0.0f, ws->out.data());
  // [K, N*plane] -> [N, K, plane], adding the bias.
  y->Resize({d.n, d.k, d.oh, d.ow});
  for (int64_t i = 0; i < d.n; ++i) {
    for (int64_t k = 0; k < d.k; ++k) {
      const float* __restrict src = ws->out.data() + k * ld + i * plane;
      float* __restrict dst = y->data() + (i * d.k + k) * plane;
      const float bias = b[k];
      for (int64_t j = 0; j < plane; ++j) dst[j] = src[j] + bias;
    }
  }
}

void Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv2dParams& p,
                    Tensor* dx, Tensor* dw, Tensor* db, Conv2dWorkspace* ws) {
  const Dims d = DimsOf(x.shape(), w.shape(), p);
  const int64_t crs = d.c * d.r * d.s;
  const int64_t plane = d.oh * d.ow;
  const int64_t ld = d.n * plane;
  // dY [N, K, plane] -> [K, N*plane]; the bias gradient is its row sums.
  ws->out.resize(static_cast<size_t>(d.k * ld));
  db->Resize({d.k});
  for (int64_t k = 0; k < d.k; ++k) {
    float sum = 0.0f;
    for (int64_t i = 0; i < d.n; ++i) {
      const float* __restrict src = dy.data() + (i * d.k + k) * plane;
      float* __restrict dst = ws->out.data() + k * ld + i * plane;
      for (int64_t j = 0; j < plane; ++j) {
        dst[j] = src[j];
        sum += src[j];
      }
    }
    (*db)[k] = sum;
  }
  dw->Resize(w.shape());
  // dW = dY' [K, N*plane] x col^T [N*plane, CRS]
  Gemm(false, true, d.k, crs, ld, 1.0f, ws->out.data(), ws->col.data(), 0.0f, dw->data());
  if (dx == nullptr) return;
  // dcol = W^T [CRS, K] x dY' [K, N*plane]
  ws->dcol.resize(static_cast<size_t>(crs * ld));
  Gemm(true, false, crs, ld, d.k, 1.0f, w.data(), ws->out.data(), 0.0f, ws->dcol.data());
  dx->Resize(x.shape());
  dx->Fill(0.0f);
  for (int64_t i = 0; i < d.n; ++i) {
    Col2Im(ws->dcol.data() + i * plane, d, p.pad, ld, dx->data() + i * d.c * d.h * d.w);
  }
}

}  // namespace lockstep::trainer::cpu
