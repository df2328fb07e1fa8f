// The preprocessing layers' Keras factories.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::preprocessing {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

// A number or a list of numbers (one per channel).
std::vector<float> Numbers(LayerConfig& c, const std::string& key, float def) {
  if (c.raw().contains(key) && c.raw()[key].is_array()) {
    std::vector<float> out;
    for (const auto& v : c.raw()[key]) {
      if (!v.is_number()) {
        c.Error("option " + key + "=" + keras::Show(c.raw()[key]) + " is not a list of numbers");
        return {def};
      }
      out.push_back(v.get<float>());
    }
    c.Ignore(key);
    return out;
  }
  return {c.Float(key, def)};
}

LayerOr Rescaling(LayerConfig& c, const LayerFactories&) {
  std::vector<float> scale = Numbers(c, "scale", 1);
  std::vector<float> offset = Numbers(c, "offset", 0);
  return graph::MakeRescaling(c.name(), scale, offset);
}

}  // namespace

void RegisterKeras(Registry& r) { r.keras().Add("Rescaling", Rescaling); }

}  // namespace lockstep::trainer::layers::preprocessing
