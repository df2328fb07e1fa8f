// The ONNX exporters of the regularization family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/regularization/regularization.h"

namespace lockstep::trainer::layers::regularization {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

}  // namespace

void RegisterOnnx(Registry& r) {
  // Identities in inference.
  const OnnxExporter identity = [](OnnxBuilder&, const OnnxArgs& a) -> Names {
    return Names{{a.in[0]}};
  };
  r.Onnx<graph::DropoutOptions>(identity);
  r.Onnx<graph::GaussianNoiseOptions>(identity);
}

}  // namespace lockstep::trainer::layers::regularization
