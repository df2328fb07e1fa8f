// The ONNX exporters of the masking family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/masking/masking.h"
#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::masking {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

}  // namespace

void RegisterOnnx(Registry& r) {
  const OnnxExporter refuse = [](OnnxBuilder&, const OnnxArgs& a) -> Names {
    return OnnxRefusal(a.layer, "masks are not exported");
  };
  r.Onnx<graph::MaskingOptions>(refuse);
  r.Onnx<graph::CompareOptions>(refuse);
  r.Onnx<graph::MaskWithOptions>(refuse);
}

}  // namespace lockstep::trainer::layers::masking
