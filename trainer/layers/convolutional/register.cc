// The registrations of the convolutions: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/graph/layers/conv.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::convolutional {

void RegisterOnnx(Registry& r);  // onnx.cc

void Register(Registry& r) {
  keras::AddConvolutionLayers(&r.keras());
  r.SupportsGpu<graph::ConvOptions>();
  r.SupportsGpu<graph::DepthwiseOptions>();
  r.SupportsGpu<graph::SeparableOptions>();
  r.SupportsGpu<graph::ConvTransposeOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::convolutional
