// The reshaping layers' Keras factories.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::layers::reshaping {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

LayerOr Flatten(LayerConfig& c, const LayerFactories&) {
  c.Expect("data_format", "channels_last");
  return graph::MakeFlatten(c.name());
}

LayerOr Reshape(LayerConfig& c, const LayerFactories&) {
  std::vector<int64_t> target = c.IntList("target_shape");
  if (target.empty()) c.Error("option target_shape is required");
  return graph::MakeReshape(c.name(), target);
}

LayerOr RepeatVector(LayerConfig& c, const LayerFactories&) {
  return graph::MakeRepeatVector(c.name(), c.Int("n", 1));
}

}  // namespace

void RegisterKeras(Registry& r) {
  r.keras().Add("Flatten", Flatten);
  r.keras().Add("Reshape", Reshape);
  r.keras().Add("RepeatVector", RepeatVector);
}

}  // namespace lockstep::trainer::layers::reshaping
