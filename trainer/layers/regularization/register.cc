// The registrations of Dropout and GaussianNoise: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/graph/layers/core.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::regularization {

void RegisterOnnx(Registry& r);  // onnx.cc

void Register(Registry& r) {
  r.SupportsGpu<graph::DropoutOptions>();
  r.SupportsGpu<graph::GaussianNoiseOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::regularization
