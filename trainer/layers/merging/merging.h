#pragma once
// The merging layers: Add, Subtract, Multiply, Average, Maximum, Minimum (MergeOp,
// kernels/types.h) and Concatenate.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct ConcatOptions {
  int64_t axis = -1;  // as given (negative counts from the end)
};
// Elementwise merge of inputs of one shape (Keras broadcasts size-1 axes; so does this).
std::unique_ptr<Layer> MakeMerge(std::string name, std::string class_name, MergeOp op);
// Concatenation along `axis` (negative counts from the end, as Keras's; batch is axis 0).
std::unique_ptr<Layer> MakeConcatenate(std::string name, int64_t axis);

}  // namespace lockstep::trainer::graph
