#pragma once
// The preprocessing layers: Rescaling.
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

}  // namespace lockstep::trainer::graph
