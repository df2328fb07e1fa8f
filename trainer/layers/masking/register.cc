// The registrations of Masking, the comparisons and a call's mask= argument: their Keras classes,
// which of them run on the GPU, and their ONNX exporters.
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::masking {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::MaskingOptions>();
  r.SupportsGpu<graph::CompareOptions>();
  r.SupportsGpu<graph::MaskWithOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::masking
