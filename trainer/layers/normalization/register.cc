// The registrations of BatchNormalization and LayerNormalization: their Keras classes, which of
// them run on the GPU, and their ONNX exporters.
#include "trainer/graph/layers/normalization.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::normalization {

void RegisterOnnx(Registry& r);  // onnx.cc

void Register(Registry& r) {
  keras::AddNormalizationLayers(&r.keras());
  r.SupportsGpu<graph::BatchNormOptions>([](const graph::Layer& l, const GpuNode& n) {
    return n.input_masked ? GpuRefusal(l, "it receives a mask (masked batch statistics)")
                          : absl::OkStatus();
  });
  r.SupportsGpu<graph::LayerNormOptions>();
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::normalization
