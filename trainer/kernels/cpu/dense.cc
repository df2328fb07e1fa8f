#include "trainer/kernels/cpu/dense.h"

#include "trainer/kernels/cpu/gemm.h"

namespace lockstep::trainer::cpu {

void DenseForward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) {
  const int64_t n = x.dim(0);
  const int64_t in = x.size() / n;
  const int64_t out = w.dim(0);
  y->Resize({n, out});
  float* py = y->data();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < out; ++j) py[i * out + j] = b[j];
  }
  Gemm(false, true, n, out, in, 1.0f, x.data(), w.data(), 1.0f, py);
}

void DenseBackward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                   Tensor* db) {
  const int64_t n = x.dim(0);
  const int64_t in = x.size() / n;
  const int64_t out = w.dim(0);
  if (dx != nullptr) {
    dx->Resize(x.shape());
    Gemm(false, false, n, in, out, 1.0f, dy.data(), w.data(), 0.0f, dx->data());
  }
  dw->Resize(w.shape());
  Gemm(true, false, out, in, n, 1.0f, dy.data(), x.data(), 0.0f, dw->data());
  db->Resize({out});
  db->Fill(0.0f);
  AddColumnSums(dy.data(), n, out, db->data());
}

void AddColumnSums(const float* src, int64_t rows, int64_t n, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * n;
    for (int64_t j = 0; j < n; ++j) dst[j] += s[j];
  }
}

}  // namespace lockstep::trainer::cpu
