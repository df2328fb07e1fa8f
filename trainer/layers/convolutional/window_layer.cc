#include "trainer/layers/convolutional/window_layer.h"

namespace lockstep::trainer::graph::conv_detail {

void Im2Col(const Geo& g, const float* x, int64_t n0, int64_t n1, float* col) {
  const int64_t c = g.c, taps = g.taps(), first = n0 * g.out_size();
  ForEachTapRun(g, n0, n1, [&](int64_t o, int64_t t, int64_t i, int64_t len) {
    float* dst = col + ((o - first) * taps + t) * c;
    if (i >= 0) {
      std::copy_n(x + i * c, len * c, dst);
    } else {
      std::fill_n(dst, len * c, 0.0f);
    }
  });
}

// x += the patches of col scattered back (x zeroed by the caller).
void Col2Im(const Geo& g, const float* col, int64_t n0, int64_t n1, float* x) {
  const int64_t c = g.c, taps = g.taps(), first = n0 * g.out_size();
  ForEachTapRun(g, n0, n1, [&](int64_t o, int64_t t, int64_t i, int64_t len) {
    if (i < 0) return;
    const float* __restrict src = col + ((o - first) * taps + t) * c;
    float* __restrict dst = x + i * c;
    for (int64_t j = 0, m = len * c; j < m; ++j) dst[j] += src[j];
  });
}

// y[o, c * m + j] += x[i, c] * w[t, c, j] over the taps (y zeroed by the caller).
void DepthwiseForward(const Geo& g, int64_t mult, const float* x, const float* w, float* y) {
  const int64_t c = g.c, cm = c * mult;
  ForEachTap(g, 0, g.n, [&](int64_t o, int64_t t, int64_t i) {
    if (i < 0) return;
    const float* xr = x + i * c;
    const float* wt = w + t * cm;
    float* yr = y + o * cm;
    if (mult == 1) {
      for (int64_t j = 0; j < c; ++j) yr[j] += xr[j] * wt[j];
    } else {
      for (int64_t j = 0; j < c; ++j) {
        const float xv = xr[j];
        for (int64_t m = 0; m < mult; ++m) yr[j * mult + m] += xv * wt[j * mult + m];
      }
    }
  });
}

// dx (zeroed by the caller; may be null) and dw (accumulated; may be null) from dy.
void DepthwiseBackward(const Geo& g, int64_t mult, const float* x, const float* w, const float* dy,
                       float* dx, float* dw) {
  const int64_t c = g.c, cm = c * mult;
  ForEachTap(g, 0, g.n, [&](int64_t o, int64_t t, int64_t i) {
    if (i < 0) return;
    const float* dyr = dy + o * cm;
    if (dx != nullptr) {
      const float* wt = w + t * cm;
      float* dxr = dx + i * c;
      if (mult == 1) {
        for (int64_t j = 0; j < c; ++j) dxr[j] += dyr[j] * wt[j];
      } else {
        for (int64_t j = 0; j < c; ++j) {
          float acc = 0;
          for (int64_t m = 0; m < mult; ++m) acc += dyr[j * mult + m] * wt[j * mult + m];
          dxr[j] += acc;
        }
      }
    }
    if (dw != nullptr) {
      const float* xr = x + i * c;
      float* dwt = dw + t * cm;
      if (mult == 1) {
        for (int64_t j = 0; j < c; ++j) dwt[j] += xr[j] * dyr[j];
      } else {
        for (int64_t j = 0; j < c; ++j) {
          const float xv = xr[j];
          for (int64_t m = 0; m < mult; ++m) dwt[j * mult + m] += xv * dyr[j * mult + m];
        }
      }
    }
  });
}

void AddBias(const float* b, int64_t rows, int64_t f, float* z) {
  for (int64_t r = 0; r < rows; ++r) {
    float* zr = z + r * f;
    for (int64_t j = 0; j < f; ++j) zr[j] += b[j];
  }
}

void AddTo(const std::vector<float>& from, float* to) {
  const float* __restrict f = from.data();
  float* __restrict t = to;
  for (size_t j = 0; j < from.size(); ++j) t[j] += f[j];
}

std::string ConvClass(const char* base, int rank, const char* suffix) {
  return std::string(base) + std::to_string(rank) + "D" + suffix;
}

}  // namespace lockstep::trainer::graph::conv_detail
