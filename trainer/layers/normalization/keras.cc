// The normalization layers' Keras factories: BatchNormalization, LayerNormalization.
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::normalization {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using keras::Show;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;
using nlohmann::json;

LayerOr BatchNormalization(LayerConfig& c, const LayerFactories&) {
  graph::BatchNormOptions o;
  o.axis = keras::ReadLastAxis(c, "axis");
  o.momentum = c.Float("momentum", 0.99f);
  o.epsilon = c.Float("epsilon", 1e-3f);
  if (o.epsilon <= 0) c.Error("option epsilon must be positive");
  o.center = c.Bool("center", true);
  o.scale = c.Bool("scale", true);
  o.beta_initializer = c.Initializer("beta_initializer", graph::Zeros());
  o.gamma_initializer = c.Initializer("gamma_initializer", graph::Ones());
  o.moving_mean_initializer = c.Initializer("moving_mean_initializer", graph::Zeros());
  o.moving_variance_initializer = c.Initializer("moving_variance_initializer", graph::Ones());
  const Regularizer br = c.Regularization("beta_regularizer");
  const Regularizer gr = c.Regularization("gamma_regularizer");
  o.beta_l1 = br.l1;
  o.beta_l2 = br.l2;
  o.gamma_l1 = gr.l1;
  o.gamma_l2 = gr.l2;
  c.ExpectNull({"beta_constraint", "gamma_constraint"});
  // Keras 3: cross-replica statistics (TensorFlow only). Keras 2 (TensorFlow) writes renorm and
  // virtual_batch_size only when set; renorm's clipping and momentum mean nothing without it.
  c.Expect("synchronized", false);
  c.Expect("renorm", false);
  c.Ignore("renorm_clipping");
  c.Ignore("renorm_momentum");
  c.Expect("virtual_batch_size", nullptr);
  return graph::MakeBatchNormalization(c.name(), o);
}

LayerOr LayerNormalization(LayerConfig& c, const LayerFactories&) {
  graph::LayerNormOptions o;
  o.axes = c.Axes("axis", {-1});
  if (o.axes.empty()) c.Error("option axis is empty");
  o.epsilon = c.Float("epsilon", 1e-3f);
  if (o.epsilon <= 0) c.Error("option epsilon must be positive");
  o.center = c.Bool("center", true);
  o.scale = c.Bool("scale", true);
  c.Expect("rms_scaling", false);
  o.beta_initializer = c.Initializer("beta_initializer", graph::Zeros());
  o.gamma_initializer = c.Initializer("gamma_initializer", graph::Ones());
  const Regularizer br = c.Regularization("beta_regularizer");
  const Regularizer gr = c.Regularization("gamma_regularizer");
  o.beta_l1 = br.l1;
  o.beta_l2 = br.l2;
  o.gamma_l1 = gr.l1;
  o.gamma_l2 = gr.l2;
  c.ExpectNull({"beta_constraint", "gamma_constraint"});
  return graph::MakeLayerNormalization(c.name(), o);
}

}  // namespace

void RegisterKeras(Registry& r) {
  r.keras().Add("BatchNormalization", BatchNormalization);
  r.keras().Add("LayerNormalization", LayerNormalization);
}

}  // namespace lockstep::trainer::layers::normalization
