// The merging layers' Keras factories.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::merging {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

LayerOr Merge(LayerConfig& c, MergeOp op) { return graph::MakeMerge(c.name(), c.class_name(), op); }

LayerOr Concatenate(LayerConfig& c, const LayerFactories&) {
  return graph::MakeConcatenate(c.name(), c.Int("axis", -1));
}

}  // namespace

void RegisterKeras(Registry& r) {
  const std::pair<const char*, MergeOp> merges[] = {
      {"Add", MergeOp::kAdd},           {"Subtract", MergeOp::kSubtract},
      {"Multiply", MergeOp::kMultiply}, {"Average", MergeOp::kAverage},
      {"Maximum", MergeOp::kMaximum},   {"Minimum", MergeOp::kMinimum}};
  for (const auto& m : merges) {
    const MergeOp op = m.second;
    r.keras().Add(m.first, [op](LayerConfig& c, const LayerFactories&) { return Merge(c, op); });
  }
  r.keras().Add("Concatenate", Concatenate);
}

}  // namespace lockstep::trainer::layers::merging
