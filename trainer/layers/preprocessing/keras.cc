// The preprocessing layers' Keras factories: Rescaling, Normalization, RandomFlip,
// RandomRotation.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/preprocessing/augment.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::preprocessing {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;
using keras::Show;
using nlohmann::json;

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

// A number or a nested list of numbers, flattened; false when it is neither.
bool Flatten(const json& v, std::vector<float>* out) {
  if (v.is_number()) {
    out->push_back(v.get<float>());
    return true;
  }
  if (!v.is_array()) return false;
  for (const json& e : v) {
    if (!Flatten(e, out)) return false;
  }
  return true;
}

LayerOr Normalization(LayerConfig& c, const LayerFactories&) {
  graph::NormalizationOptions o;
  const bool none = c.raw().contains("axis") && c.raw()["axis"].is_null();
  if (none) {
    c.Ignore("axis");
    o.axis.reset();
  } else {
    o.axis = keras::ReadLastAxis(c, "axis");
  }
  const json mean = c.Object("mean");
  const json variance = c.Object("variance");
  if (mean.is_null() != variance.is_null()) {
    c.Error("options mean and variance must be given together");
  } else if (!mean.is_null()) {
    std::vector<float> m, v;
    if (!Flatten(mean, &m) || !Flatten(variance, &v) || m.empty() || m.size() != v.size()) {
      c.Error("options mean=" + Show(mean) + " and variance=" + Show(variance) +
              " are not numbers or lists of one length");
    } else {
      o.mean = std::move(m);
      o.variance = std::move(v);
    }
  }
  o.invert = c.Bool("invert", false);
  return graph::MakeNormalization(c.name(), o);
}

LayerOr RandomFlip(LayerConfig& c, const LayerFactories&) {
  const std::string mode = c.String("mode", "horizontal_and_vertical");
  c.Ignore("seed");  // the trainer's seed drives every random draw
  c.Expect("data_format", "channels_last");
  c.Expect("value_range", nullptr);
  if (mode != "horizontal" && mode != "vertical" && mode != "horizontal_and_vertical") {
    c.Refuse("option mode=\"" + mode + "\"");
  }
  return graph::MakeRandomFlip(c.name(), mode != "vertical", mode != "horizontal");
}

LayerOr RandomRotation(LayerConfig& c, const LayerFactories&) {
  graph::RotationOptions o;
  const nlohmann::json& f = c.raw().contains("factor") ? c.raw()["factor"] : nlohmann::json();
  if (f.is_number()) {
    o.lower = -f.get<float>();
    o.upper = f.get<float>();
  } else if (f.is_array() && f.size() == 2 && f[0].is_number() && f[1].is_number()) {
    o.lower = f[0].get<float>();
    o.upper = f[1].get<float>();
  } else {
    c.Error("option factor=" + Show(f) + " is not a number or a pair");
  }
  c.Ignore("factor");
  const std::string fill = c.String("fill_mode", "reflect");
  o.fill = fill == "wrap"       ? graph::FillMode::kWrap
           : fill == "constant" ? graph::FillMode::kConstant
           : fill == "nearest"  ? graph::FillMode::kNearest
                                : graph::FillMode::kReflect;
  if (fill != "wrap" && fill != "constant" && fill != "nearest" && fill != "reflect") {
    c.Refuse("option fill_mode=\"" + fill + "\"");
  }
  const std::string interp = c.String("interpolation", "bilinear");
  if (interp != "bilinear" && interp != "nearest")
    c.Refuse("option interpolation=\"" + interp + "\"");
  o.bilinear = interp == "bilinear";
  o.fill_value = c.Float("fill_value", 0);
  c.Ignore("seed");
  c.Expect("data_format", "channels_last");
  c.Expect("value_range", nullptr);
  return graph::MakeRandomRotation(c.name(), o);
}

}  // namespace

void RegisterKeras(Registry& r) {
  r.keras().Add("Rescaling", Rescaling);
  r.keras().Add("Normalization", Normalization);
  r.keras().Add("RandomFlip", RandomFlip);
  r.keras().Add("RandomRotation", RandomRotation);
}

}  // namespace lockstep::trainer::layers::preprocessing
