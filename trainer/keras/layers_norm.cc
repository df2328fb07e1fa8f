// The normalization layers' factories (trainer/graph/layers/normalization.h).
#include "trainer/graph/layers/normalization.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {
namespace {

using graph::Layer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;
using nlohmann::json;

// One axis: -1 or a positive axis (the build checks it is the last).
int64_t ReadAxis(LayerConfig& c, const std::string& key) {
  const json shown = c.raw().contains(key) ? c.raw()[key] : json();
  const std::vector<int64_t> axes = c.Axes(key, {-1});
  if (axes.size() != 1 || (axes[0] != -1 && axes[0] < 1)) {
    c.Refuse("option " + key + "=" + Show(shown) + " (only the last axis, channels-last)");
    return -1;
  }
  return axes[0];
}

LayerOr BatchNormalization(LayerConfig& c, const LayerFactories&) {
  graph::BatchNormOptions o;
  o.axis = ReadAxis(c, "axis");
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
    o.axis = ReadAxis(c, "axis");
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

}  // namespace

void AddNormalizationLayers(LayerFactories* f) {
  f->Add("BatchNormalization", BatchNormalization);
  f->Add("LayerNormalization", LayerNormalization);
  f->Add("Normalization", Normalization);
}

}  // namespace lockstep::trainer::keras
