#pragma once
// The layers that change only the shape: Flatten, Reshape, RepeatVector.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct ReshapeOptions {
  Shape target;  // Reshape's (empty for Flatten)
  bool flatten = false;
};
std::unique_ptr<Layer> MakeFlatten(std::string name);
// Reshape to `target` (per example; one -1 is inferred).
std::unique_ptr<Layer> MakeReshape(std::string name, Shape target);
struct RepeatOptions {
  int64_t n = 1;
};
// [batch, d] -> [batch, n, d].
std::unique_ptr<Layer> MakeRepeatVector(std::string name, int64_t n);

}  // namespace lockstep::trainer::graph
