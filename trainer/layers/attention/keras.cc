// The attention layers' Keras factories: MultiHeadAttention from the configs Keras 2 (2.4 ...
// 2.15) and Keras 3 write.
#include "trainer/keras/layer_factory.h"
#include "trainer/layers/attention/attention.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::attention {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

LayerOr MultiHeadAttention(LayerConfig& c, const LayerFactories&) {
  graph::MultiHeadAttentionOptions o;
  if (!c.Has("num_heads") || !c.Has("key_dim"))
    c.Error("options num_heads and key_dim are required");
  o.num_heads = c.Int("num_heads", 1);
  o.key_dim = c.Int("key_dim", 1);
  o.value_dim = c.Int("value_dim", 0);  // null or 0: key_dim, as Keras
  if (o.num_heads <= 0 || o.key_dim <= 0 || o.value_dim < 0) {
    c.Error("num_heads, key_dim and value_dim must be positive");
  }
  o.dropout = c.Float("dropout", 0);
  if (o.dropout < 0 || o.dropout >= 1) c.Error("option dropout must be in [0, 1)");
  o.use_bias = c.Bool("use_bias", true);
  // Projecting to another shape than the query's is not implemented.
  c.Expect("output_shape", nullptr);
  // Keras 2 writes the axes it resolved at build ([1] for sequences); Build accepts the
  // default set and refuses others.
  o.attention_axes = c.Axes("attention_axes", {});
  o.kernel_initializer = c.Initializer("kernel_initializer", graph::GlorotUniform());
  o.bias_initializer = c.Initializer("bias_initializer", graph::Zeros());
  const Regularizer kr = c.Regularization("kernel_regularizer");
  const Regularizer br = c.Regularization("bias_regularizer");
  o.kernel_l1 = kr.l1;
  o.kernel_l2 = kr.l2;
  o.bias_l1 = br.l1;
  o.bias_l2 = br.l2;
  c.Expect("kernel_constraint", nullptr);
  c.Expect("bias_constraint", nullptr);
  c.Ignore("flash_attention");  // Keras 3: which kernel computes the same attention
  c.Ignore("seed");             // the trainer's seed drives the dropout
  // Keras 2.10+: the shapes it was built for; the graph checks the inputs itself.
  c.Ignore("query_shape");
  c.Ignore("key_shape");
  c.Ignore("value_shape");
  return graph::MakeMultiHeadAttention(c.name(), o);
}

}  // namespace

void RegisterKeras(Registry& r) { r.keras().Add("MultiHeadAttention", MultiHeadAttention); }

}  // namespace lockstep::trainer::layers::attention
