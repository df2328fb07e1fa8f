// The ONNX exporters of the reshaping family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::layers::reshaping {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

std::string PadCrop(OnnxBuilder& ox, const std::string& x, const graph::PadCropOptions& o) {
  if (o.pad) {
    std::vector<int64_t> pads(static_cast<size_t>(2 * (o.rank + 2)), 0);
    for (int i = 0; i < o.rank; ++i) {
      pads[static_cast<size_t>(1 + i)] = o.pairs[static_cast<size_t>(i)].first;
      pads[static_cast<size_t>(o.rank + 2 + 1 + i)] = o.pairs[static_cast<size_t>(i)].second;
    }
    return ox.Op("Pad", {x, ox.Ints(pads)}, {{"mode", std::string("constant")}});
  }
  std::vector<int64_t> starts, ends, axes;
  for (int i = 0; i < o.rank; ++i) {
    const auto& [b, a] = o.pairs[static_cast<size_t>(i)];
    starts.push_back(b);
    ends.push_back(a == 0 ? kOnnxIndexMax : -a);
    axes.push_back(1 + i);
  }
  return ox.Op("Slice", {x, ox.Ints(starts), ox.Ints(ends), ox.Ints(axes)});
}

std::string UpSampling(OnnxBuilder& ox, const std::string& x, const graph::UpSamplingOptions& o) {
  std::vector<float> scales{1};
  for (int64_t s : o.size) scales.push_back(static_cast<float>(s));
  scales.push_back(1);
  const std::string sc = ox.Const("scales", {static_cast<int64_t>(scales.size())}, scales);
  if (o.interpolation == graph::Interpolation::kBilinear) {
    return ox.Op("Resize", {x, "", sc},
                 {{"mode", std::string("linear")},
                  {"coordinate_transformation_mode", std::string("half_pixel")}});
  }
  return ox.Op("Resize", {x, "", sc},
               {{"mode", std::string("nearest")},
                {"coordinate_transformation_mode", std::string("asymmetric")},
                {"nearest_mode", std::string("floor")}});
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::ReshapeOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    if (OptionsOf<graph::ReshapeOptions>(a.layer)->flatten) {
      return Names{{ox.Op("Flatten", {a.in[0]}, {{"axis", int64_t{1}}})}};
    }
    const Shape& target = ox.ShapeOf(a.out_t[0]);
    if (std::count(target.begin(), target.end(), -1) > 1) {
      return OnnxRefusal(a.layer, "a target shape with more than one open axis");
    }
    std::vector<int64_t> shape{0};
    shape.insert(shape.end(), target.begin(), target.end());
    return Names{{ox.Op("Reshape", {a.in[0], ox.Ints(shape)})}};
  });
  r.Onnx<graph::RepeatOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    const int64_t n = ox.ShapeOf(a.out_t[0])[0];
    return Names{
        {ox.Op("Tile", {ox.Op("Unsqueeze", {a.in[0], ox.Ints({1})}), ox.Ints({1, n, 1})})}};
  });
  r.Onnx<graph::PadCropOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Names{{PadCrop(ox, a.in[0], *OptionsOf<graph::PadCropOptions>(a.layer))}};
  });
  r.Onnx<graph::UpSamplingOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return Names{{UpSampling(ox, a.in[0], *OptionsOf<graph::UpSamplingOptions>(a.layer))}};
  });
}

}  // namespace lockstep::trainer::layers::reshaping
