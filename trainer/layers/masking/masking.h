#pragma once
// The masking layers: Masking, the comparisons Keras 3 records as layers, and a call's
// mask= argument.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct CompareOptions {
  CompareOp op = CompareOp::kEqual;
  float constant = 0;
};
struct MaskingOptions {
  float value = 0;
};
struct MaskWithOptions {};
// 1 where `x op constant` holds, else 0 (Keras 3's comparison ops recorded as layers, such as
// the NotEqual that makes a padding mask). Carries no gradient.
std::unique_ptr<Layer> MakeCompare(std::string name, std::string class_name, CompareOp op,
                                   float constant);
// Keras's Masking: a time step whose features all equal `value` is masked (zeroed, and 0 in
// the [batch, time] mask that follows the output).
std::unique_ptr<Layer> MakeMasking(std::string name, float value);
// Inputs [x, m]: passes x through with m as its mask (a call's `mask=` argument).
std::unique_ptr<Layer> MakeMaskWith(std::string name);

}  // namespace lockstep::trainer::graph
