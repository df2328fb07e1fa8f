// The ONNX exporters of the pooling family (layers/onnx_builder.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/pooling/pooling.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::pooling {
namespace {

using graph::Layer;
using graph::OptionsOf;
using Names = absl::StatusOr<std::vector<std::string>>;

absl::StatusOr<std::string> Pool(OnnxBuilder& ox, const std::string& x,
                                 const std::vector<int>& in_t, const graph::PoolOptions& o) {
  absl::StatusOr<std::vector<OnnxAttr>> attrs =
      ox.WindowAttrs(ox.ShapeOf(in_t[0]), o.rank, o.pool_size, o.strides,
                     std::vector<int64_t>(static_cast<size_t>(o.rank), 1), o.padding, false);
  if (!attrs.ok()) return attrs.status();
  const bool max = o.mode == graph::PoolMode::kMax;
  if (!max) attrs->push_back({"count_include_pad", int64_t{0}});
  return ox.ToChannelsLast(
      ox.Op(max ? "MaxPool" : "AveragePool", {ox.ToChannelsFirst(x, o.rank)}, *attrs), o.rank);
}

}  // namespace

void RegisterOnnx(Registry& r) {
  r.Onnx<graph::PoolOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    return OneOutput(Pool(ox, a.in[0], a.in_t, *OptionsOf<graph::PoolOptions>(a.layer)));
  });
  r.Onnx<graph::GlobalPoolOptions>([](OnnxBuilder& ox, const OnnxArgs& a) -> Names {
    const graph::GlobalPoolOptions p = *OptionsOf<graph::GlobalPoolOptions>(a.layer);
    std::vector<int64_t> axes;
    for (int i = 1; i <= p.rank; ++i) axes.push_back(i);
    return Names{{ox.Op(p.mode == graph::PoolMode::kMax ? "ReduceMax" : "ReduceMean", {a.in[0]},
                        {{"axes", axes}, {"keepdims", int64_t{p.keepdims ? 1 : 0}}})}};
  });
}

}  // namespace lockstep::trainer::layers::pooling
