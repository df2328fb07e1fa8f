// The core layers' factories (trainer/graph/layers/core.h).
#include "trainer/graph/layers/core.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {
namespace {

using graph::Layer;
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

// A number or a list of numbers (one per channel).
std::vector<float> Numbers(LayerConfig& c, const std::string& key, float def) {
  if (c.raw().contains(key) && c.raw()[key].is_array()) {
    std::vector<float> out;
    for (const auto& v : c.raw()[key]) {
      if (!v.is_number()) {
        c.Error("option " + key + "=" + Show(c.raw()[key]) + " is not a list of numbers");
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

LayerOr Merge(LayerConfig& c, MergeOp op) { return graph::MakeMerge(c.name(), c.class_name(), op); }

LayerOr Concatenate(LayerConfig& c, const LayerFactories&) {
  return graph::MakeConcatenate(c.name(), c.Int("axis", -1));
}

}  // namespace

void AddCoreLayers(LayerFactories* f) {
  f->Add("Dense", Dense);
  f->Add("Activation", ActivationLayer);
  f->Add("ReLU", ReLU);
  f->Add("LeakyReLU", LeakyReLU);
  f->Add("ELU", ELU);
  f->Add("Softmax", Softmax);
  f->Add("Flatten", Flatten);
  f->Add("Reshape", Reshape);
  f->Add("RepeatVector", RepeatVector);
  f->Add("Dropout", Dropout);
  f->Add("GaussianNoise", GaussianNoise);
  f->Add("Rescaling", Rescaling);
  f->Add("Add", [](LayerConfig& c, const LayerFactories&) { return Merge(c, MergeOp::kAdd); });
  f->Add("Subtract",
         [](LayerConfig& c, const LayerFactories&) { return Merge(c, MergeOp::kSubtract); });
  f->Add("Multiply",
         [](LayerConfig& c, const LayerFactories&) { return Merge(c, MergeOp::kMultiply); });
  f->Add("Average",
         [](LayerConfig& c, const LayerFactories&) { return Merge(c, MergeOp::kAverage); });
  f->Add("Maximum",
         [](LayerConfig& c, const LayerFactories&) { return Merge(c, MergeOp::kMaximum); });
  f->Add("Minimum",
         [](LayerConfig& c, const LayerFactories&) { return Merge(c, MergeOp::kMinimum); });
  f->Add("Concatenate", Concatenate);
  f->Add("Masking", [](LayerConfig& c, const LayerFactories&) -> LayerOr {
    return graph::MakeMasking(c.name(), c.Float("mask_value", 0.0f));
  });
}

}  // namespace lockstep::trainer::keras
