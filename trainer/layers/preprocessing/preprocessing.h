#pragma once
// The preprocessing layers: Rescaling, and Normalization: y = (x - mean) / max(sqrt(var), 1e-7)
// (invert: x * max(sqrt(var), 1e-7) + mean), per channel of the last axis or over everything
// (axis None). Its statistics come from the config, or from the non-trainable weights "mean",
// "variance" and "count" (an adapted layer's, loaded with its weights; zeros, ones and 0 until
// then). Masks pass through.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct RescalingOptions {
  std::vector<float> scale, offset;
};
// y = x * scale + offset; a list of scales or offsets applies along the last axis.
std::unique_ptr<Layer> MakeRescaling(std::string name, std::vector<float> scale,
                                     std::vector<float> offset);

struct NormalizationOptions {
  // The axis with its own statistics, as Keras counts it (-1 or the last axis); absent: one
  // mean and variance for every element (Keras's axis=None).
  std::optional<int64_t> axis = -1;
  // From the config: one value (broadcast) or one per channel. Absent: the weights.
  std::optional<std::vector<float>> mean, variance;
  bool invert = false;
};
std::unique_ptr<Layer> MakeNormalization(std::string name, NormalizationOptions o);

}  // namespace lockstep::trainer::graph
