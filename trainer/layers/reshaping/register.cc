// The registrations of Flatten, Reshape, RepeatVector, the paddings and croppings, UpSampling:
// their Keras classes, which of them run on the GPU, and their ONNX exporters.
#include "trainer/layers/registry.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::layers::reshaping {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::ReshapeOptions>();
  r.SupportsGpu<graph::RepeatOptions>();
  r.SupportsGpu<graph::PadCropOptions>();
  r.SupportsGpu<graph::UpSamplingOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::reshaping
