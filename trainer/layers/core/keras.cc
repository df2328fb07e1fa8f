// The core layers' Keras factories (Dense, the activation layers, Embedding).
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
using keras::Show;
using nlohmann::json;
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

// Keras 2's input_length (an int, a list for inputs of higher rank, or null) is inert, but the
// input must match it; Keras 3's LoRA and quantization options must be off.
LayerOr Embedding(LayerConfig& c, const LayerFactories&) {
  graph::EmbeddingOptions o;
  if (!c.Has("input_dim") || !c.Has("output_dim")) {
    c.Error("options input_dim and output_dim are required");
  }
  o.input_dim = c.Int("input_dim", 1);
  o.output_dim = c.Int("output_dim", 1);
  if (o.input_dim <= 0 || o.output_dim <= 0) c.Error("input_dim and output_dim must be positive");
  o.embeddings_initializer =
      c.Initializer("embeddings_initializer", graph::RandomUniform(-0.05f, 0.05f));
  const Regularizer r = c.Regularization("embeddings_regularizer");
  o.l1 = r.l1;
  o.l2 = r.l2;
  c.Expect("embeddings_constraint", nullptr);
  o.mask_zero = c.Bool("mask_zero", false);
  // Keras 2's input_length (an int, a list for inputs of higher rank, or null): inert, but
  // the input must match it.
  const json len = c.Object("input_length");
  if (len.is_number_integer()) {
    o.input_length = {len.get<int64_t>()};
  } else if (len.is_array()) {
    for (const json& e : len) {
      if (e.is_null()) {
        o.input_length.push_back(-1);
      } else if (e.is_number_integer()) {
        o.input_length.push_back(e.get<int64_t>());
      } else {
        c.Error("option input_length=" + Show(len) + " is not a length or a list of them");
      }
    }
  } else if (!len.is_null()) {
    c.Error("option input_length=" + Show(len) + " is not a length or a list of them");
  }
  // Keras 3.
  c.Expect("sparse", false);
  c.Expect("lora_rank", nullptr);
  c.Expect("lora_alpha", nullptr);
  c.Expect("quantization_config", nullptr);
  return graph::MakeEmbedding(c.name(), o);
}

}  // namespace

void RegisterKeras(Registry& r) {
  r.keras().Add("Dense", Dense);
  r.keras().Add("Activation", ActivationLayer);
  r.keras().Add("ReLU", ReLU);
  r.keras().Add("LeakyReLU", LeakyReLU);
  r.keras().Add("ELU", ELU);
  r.keras().Add("Softmax", Softmax);
  r.keras().Add("Embedding", Embedding);
}

}  // namespace lockstep::trainer::layers::core
