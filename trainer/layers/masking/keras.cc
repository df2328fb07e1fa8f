// The masking layers' Keras factories.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::masking {

using keras::LayerConfig;
using keras::LayerFactories;
using LayerOr = absl::StatusOr<std::unique_ptr<graph::Layer>>;

void RegisterKeras(Registry& r) {
  r.keras().Add("Masking", [](LayerConfig& c, const LayerFactories&) -> LayerOr {
    return graph::MakeMasking(c.name(), c.Float("mask_value", 0.0f));
  });
}

}  // namespace lockstep::trainer::layers::masking
