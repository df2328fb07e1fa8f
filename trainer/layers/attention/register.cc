// The registrations of MultiHeadAttention: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/graph/layers/attention.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::attention {

void RegisterOnnx(Registry& r);  // onnx.cc

void Register(Registry& r) {
  keras::AddAttentionLayers(&r.keras());
  r.SupportsGpu<graph::MultiHeadAttentionOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::attention
