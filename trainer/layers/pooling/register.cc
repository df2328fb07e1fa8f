// The registrations of the poolings: their Keras classes, which of them
// run on the GPU, and their ONNX exporters.
#include "trainer/graph/layers/pooling.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::pooling {

void RegisterOnnx(Registry& r);  // onnx.cc

void Register(Registry& r) {
  keras::AddPoolingLayers(&r.keras());
  r.SupportsGpu<graph::PoolOptions>();
  r.SupportsGpu<graph::GlobalPoolOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::pooling
