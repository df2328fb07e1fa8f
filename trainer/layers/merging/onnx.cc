// The ONNX exporters of the merging family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/merging/merging.h"
#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::merging {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

std::string Merge(OnnxBuilder& ox, MergeOp m, const std::vector<std::string>& in) {
  switch (m) {
    case MergeOp::kAdd:
      return ox.Op("Sum", in);
    case MergeOp::kSubtract:
      return ox.Op("Sub", {in[0], in[1]});
    case MergeOp::kMultiply: {
      std::string y = in[0];
      for (size_t i = 1; i < in.size(); ++i) y = ox.Op("Mul", {y, in[i]});
      return y;
    }
    case MergeOp::kAverage:
      return ox.Op("Mean", in);
    case MergeOp::kMaximum:
      return ox.Op("Max", in);
    case MergeOp::kMinimum:
      return ox.Op("Min", in);
  }
  return in[0];
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<MergeOp>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Names{{Merge(ox, *OptionsOf<MergeOp>(a.layer), a.in)}};
  });
  r.Onnx<graph::ConcatOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Names{
        {ox.Op("Concat", a.in, {{"axis", OptionsOf<graph::ConcatOptions>(a.layer)->axis}})}};
  });
}

}  // namespace lockstep::trainer::layers::merging
