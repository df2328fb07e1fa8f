// The image augmentation layers' factories (trainer/graph/layers/augment.h).
#include "trainer/graph/layers/augment.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {
namespace {

using LayerOr = absl::StatusOr<std::unique_ptr<graph::Layer>>;

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

void AddAugmentationLayers(LayerFactories* f) {
  f->Add("RandomFlip", RandomFlip);
  f->Add("RandomRotation", RandomRotation);
}

}  // namespace lockstep::trainer::keras
