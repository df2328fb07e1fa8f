#pragma once
// The normalization layers as Keras defines them, over the last (channels) axis:
//
// BatchNormalization: in training, each channel is normalised with the batch's mean and
// biased variance over every other axis, y = gamma (x - mean) / sqrt(var + epsilon) + beta, and
// the moving statistics follow moving = moving * momentum + batch * (1 - momentum), with the
// same biased variance (Keras 3's ops.moments; Keras 2's fused kernel returns the corrected
// variance and Keras removes the correction before the update). In inference, or when the layer
// is frozen (trainable = false, Keras >= 2.1.3), the moving statistics normalise and nothing
// updates. A [batch, time] mask in training excludes the masked steps from the batch
// statistics, as Keras 3 does (mean = sum(m x) / (sum m + 1e-7), likewise the variance).
// Weights "gamma", "beta" (trainable, when scale/center) then "moving_mean",
// "moving_variance".
//
// LayerNormalization: per example over the trailing axes given (the last by default),
// y = gamma (x - mean) / sqrt(var + epsilon) + beta with gamma and beta shaped as those axes.
//
// Masks pass through both, as Keras's do. (Normalization, the preprocessing layer, is in
// layers/preprocessing/.)
// Thread-safety: one thread per layer object (layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/graph/initializer.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct BatchNormOptions {
  // The channel axis as Keras counts it (the batch is 0): -1 or the input's last axis.
  int64_t axis = -1;
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  bool center = true, scale = true;
  Initializer beta_initializer = Zeros();
  Initializer gamma_initializer = Ones();
  Initializer moving_mean_initializer = Zeros();
  Initializer moving_variance_initializer = Ones();
  float gamma_l1 = 0, gamma_l2 = 0, beta_l1 = 0, beta_l2 = 0;
};
std::unique_ptr<Layer> MakeBatchNormalization(std::string name, BatchNormOptions o);

struct LayerNormOptions {
  // Axes as Keras counts them (the batch is 0; negative from the end): they must be the
  // input's trailing axes.
  std::vector<int64_t> axes{-1};
  float epsilon = 1e-3f;
  bool center = true, scale = true;
  Initializer beta_initializer = Zeros();
  Initializer gamma_initializer = Ones();
  float gamma_l1 = 0, gamma_l2 = 0, beta_l1 = 0, beta_l2 = 0;
};
std::unique_ptr<Layer> MakeLayerNormalization(std::string name, LayerNormOptions o);

}  // namespace lockstep::trainer::graph
