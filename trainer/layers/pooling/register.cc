// The registrations of the poolings: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/layers/pooling/pooling.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::pooling {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::PoolOptions>();
  r.SupportsGpu<graph::GlobalPoolOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::pooling
