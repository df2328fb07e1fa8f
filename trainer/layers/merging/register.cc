// The registrations of Add, Subtract, Multiply, Average, Maximum, Minimum and Concatenate: their
// Keras classes, which of them run on the GPU, and their ONNX exporters.
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::merging {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<MergeOp>();
  r.SupportsGpu<graph::ConcatOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::merging
