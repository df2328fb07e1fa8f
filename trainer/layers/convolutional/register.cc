// The registrations of the convolutions: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::convolutional {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::ConvOptions>();
  r.SupportsGpu<graph::DepthwiseOptions>();
  r.SupportsGpu<graph::SeparableOptions>();
  r.SupportsGpu<graph::ConvTransposeOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::convolutional
