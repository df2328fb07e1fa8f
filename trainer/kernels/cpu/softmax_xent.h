#pragma once
// Softmax cross-entropy over logits [N, C] with integer labels: the mean loss over the batch,
// the gradient with respect to the logits ((softmax - onehot) / N), and the number of rows
// whose arg-max is the label. Numerically stable (the row maximum is subtracted).
// Thread-safety: reentrant.

#include <cstdint>
#include <vector>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {

struct XentResult {
  double loss = 0;      // mean over the batch
  int64_t correct = 0;  // rows whose prediction is the label
};

// `dlogits` may be null (evaluation).
XentResult SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                               Tensor* dlogits);

}  // namespace lockstep::trainer::cpu
