// The registrations of Rescaling, Normalization, RandomFlip and RandomRotation: their Keras
// classes, which of them run on the GPU, and their ONNX exporters.
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::preprocessing {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::RescalingOptions>();
  r.SupportsGpu<graph::NormalizationOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::preprocessing
