#include "trainer/kernels/cpu/softmax_xent.h"

#include <cmath>

namespace lockstep::trainer::cpu {

XentResult SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                               Tensor* dlogits) {
  const int64_t n = logits.dim(0);
  const int64_t c = logits.dim(1);
  if (dlogits != nullptr) dlogits->Resize(logits.shape());
  XentResult r;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * c;
    int64_t best = 0;
    float max = row[0];
    for (int64_t j = 1; j < c; ++j) {
      if (row[j] > max) {
        max = row[j];
        best = j;
      }
    }
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(row[j] - max));
    const int32_t label = labels[static_cast<size_t>(i)];
    r.loss += std::log(sum) - static_cast<double>(row[label] - max);
    if (best == label) ++r.correct;
    if (dlogits != nullptr) {
      float* d = dlogits->data() + i * c;
      for (int64_t j = 0; j < c; ++j) {
        float p = static_cast<float>(std::exp(static_cast<double>(row[j] - max)) / sum);
        d[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_n;
      }
    }
  }
  r.loss /= static_cast<double>(n);
  return r;
}

}  // namespace lockstep::trainer::cpu
