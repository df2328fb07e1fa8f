// The registrations of BatchNormalization and LayerNormalization: their Keras classes, which of
// them run on the GPU, and their ONNX exporters.
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::normalization {

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::BatchNormOptions>([](const graph::Layer& l, const GpuNode& n) {
    return n.input_masked ? GpuRefusal(l, "it receives a mask (masked batch statistics)")
                          : absl::OkStatus();
  });
  r.SupportsGpu<graph::LayerNormOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::normalization
