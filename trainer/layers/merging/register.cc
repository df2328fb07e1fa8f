// The registrations of Add, Subtract, Multiply, Average, Maximum, Minimum and Concatenate: their
// Keras classes, which of them run on the GPU, and their ONNX exporters.
#include "trainer/graph/layers/core.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::merging {

void RegisterOnnx(Registry& r);  // onnx.cc

void Register(Registry& r) {
  r.SupportsGpu<MergeOp>();
  r.SupportsGpu<graph::ConcatOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::merging
