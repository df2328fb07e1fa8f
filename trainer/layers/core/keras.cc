// The core layers' Keras factories.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::core {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

// Constraints (max_norm...) are not implemented: each must be null.
LayerOr Dense(LayerConfig& c, const LayerFactories&) {
  graph::DenseOptions o;
  o.units = c.Int("units", 1);
  o.activation = c.Activation("activation", "linear");
  o.use_bias = c.Bool("use_bias", true);
  o.kernel_initializer = c.Initializer("kernel_initializer", graph::GlorotUniform());
  o.bias_initializer = c.Initializer("bias_initializer", graph::Zeros());
  const Regularizer kr = c.Regularization("kernel_regularizer");
  const Regularizer br = c.Regularization("bias_regularizer");
  o.kernel_l1 = kr.l1;
  o.kernel_l2 = kr.l2;
  o.bias_l1 = br.l1;
  o.bias_l2 = br.l2;
  c.ExpectNull({"kernel_constraint", "bias_constraint"});
  c.Expect("lora_rank", nullptr);
  c.Expect("lora_alpha", nullptr);
  c.Expect("quantization_config", nullptr);
  if (o.units <= 0) c.Error("units must be positive");
  return graph::MakeDense(c.name(), o);
}

LayerOr ActivationLayer(LayerConfig& c, const LayerFactories&) {
  return graph::MakeActivation(c.name(), "Activation", c.Activation("activation", "linear"));
}

LayerOr ReLU(LayerConfig& c, const LayerFactories&) {
  const float max_value = c.Has("max_value") ? c.Float("max_value", 0) : 3.4e38f;
  c.Ignore("max_value");
  const float slope = c.Float("negative_slope", 0);
  const float threshold = c.Float("threshold", 0);
  return graph::MakeRelu(c.name(), max_value, slope, threshold);
}

LayerOr LeakyReLU(LayerConfig& c, const LayerFactories&) {
  // Keras 2 calls the slope alpha (default 0.3), Keras 3 negative_slope (also 0.3).
  float slope = 0.3f;
  if (c.Has("negative_slope")) slope = c.Float("negative_slope", 0.3f);
  if (c.Has("alpha")) slope = c.Float("alpha", 0.3f);
  c.Ignore("alpha");
  c.Ignore("negative_slope");
  Activation a{Act::kLeakyRelu, slope};
  return graph::MakeActivation(c.name(), "LeakyReLU", a);
}

LayerOr ELU(LayerConfig& c, const LayerFactories&) {
  Activation a{Act::kElu, c.Float("alpha", 1.0f)};
  return graph::MakeActivation(c.name(), "ELU", a);
}

LayerOr Softmax(LayerConfig& c, const LayerFactories&) {
  const std::vector<int64_t> axis = c.Axes("axis", {-1});
  if (axis != std::vector<int64_t>{-1}) c.Refuse("option axis other than -1");
  return graph::MakeActivation(c.name(), "Softmax", {Act::kSoftmax, 0});
}

}  // namespace

void RegisterKeras(Registry& r) {
  r.keras().Add("Dense", Dense);
  r.keras().Add("Activation", ActivationLayer);
  r.keras().Add("ReLU", ReLU);
  r.keras().Add("LeakyReLU", LeakyReLU);
  r.keras().Add("ELU", ELU);
  r.keras().Add("Softmax", Softmax);
}

}  // namespace lockstep::trainer::layers::core
