#pragma once
// Losses as Keras computes them: each output element's loss over the last axis (summed over
// the classes for cross-entropies, averaged for the regression losses), then the mean over the
// batch and any other axes (Keras's sum_over_batch_size). Probabilities are clipped to
// [1e-7, 1 - 1e-7] as Keras's backend does; from_logits computes from logits stably.
// Thread-safety: pure functions.

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/kernels/types.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph {

// A Keras loss as a compile config writes it: "sparse_categorical_crossentropy", "mse", or
// {"class_name": "CategoricalCrossentropy", "config": {"from_logits": true, ...}}.
// InvalidArgument names an unknown loss or option.
absl::StatusOr<Loss> ParseLoss(const nlohmann::json& v);
std::string LossName(const Loss& l);

// The mean loss of `pred` against `target`; fills dpred (may be null) with dL/dpred. A
// sparse target holds class ids (as floats); an id outside [0, classes) is InvalidArgument.
// `sample_weight` ([batch], may be null) scales each example's losses, the mean still taken
// over every element as Keras's sum_over_batch_size does.
absl::StatusOr<double> ComputeLoss(const Loss& l, const Tensor& pred, const Tensor& target,
                                   Tensor* dpred, const Tensor* sample_weight = nullptr);

// Predictions counted right, Keras's accuracy for the loss: arg-max against the class id or
// the one-hot arg-max, or a 0.5 threshold for binary outputs; `count` gets the elements judged.
int64_t CountCorrect(const Loss& l, const Tensor& pred, const Tensor& target, int64_t* count);

}  // namespace lockstep::trainer::graph
