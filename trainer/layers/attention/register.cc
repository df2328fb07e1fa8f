// The registrations of MultiHeadAttention: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/layers/attention/attention.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::attention {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::MultiHeadAttentionOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::attention
