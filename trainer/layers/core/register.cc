// The registrations of Dense, the activation layers and Embedding: their Keras classes, which of
// them run on the GPU, and their ONNX exporters.
#include "trainer/layers/core/core.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::core {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::DenseOptions>();
  r.SupportsGpu<Activation>();
  r.SupportsGpu<graph::ReluOptions>([](const graph::Layer& l, const GpuNode&) {
    return graph::ReluActivation(*graph::OptionsOf<graph::ReluOptions>(l))
               ? absl::OkStatus()
               : GpuRefusal(l,
                            "a ReLU with a threshold, or with both max_value and negative_slope");
  });
  r.SupportsGpu<graph::EmbeddingOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::core
