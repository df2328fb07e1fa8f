// The regularization layers' Keras factories.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/regularization/regularization.h"

namespace lockstep::trainer::layers::regularization {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

LayerOr Dropout(LayerConfig& c, const LayerFactories&) {
  const float rate = c.Float("rate", 0.5f);
  if (rate < 0 || rate >= 1) c.Error("option rate must be in [0, 1)");
  c.Ignore("seed");  // the trainer's seed drives every random draw
  Shape noise = c.IntList("noise_shape");
  if (!noise.empty()) noise.erase(noise.begin());  // the batch axis
  return graph::MakeDropout(c.name(), rate, noise);
}

LayerOr GaussianNoise(LayerConfig& c, const LayerFactories&) {
  c.Ignore("seed");
  return graph::MakeGaussianNoise(c.name(), c.Float("stddev", 0));
}

}  // namespace

void RegisterKeras(Registry& r) {
  r.keras().Add("Dropout", Dropout);
  r.keras().Add("GaussianNoise", GaussianNoise);
}

}  // namespace lockstep::trainer::layers::regularization
