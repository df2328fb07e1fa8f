// The registrations of Dropout and GaussianNoise: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/layers/registry.h"
#include "trainer/layers/regularization/regularization.h"

namespace lockstep::trainer::layers::regularization {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::DropoutOptions>();
  r.SupportsGpu<graph::GaussianNoiseOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::regularization
