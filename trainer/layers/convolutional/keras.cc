// The convolutions' Keras factories: Conv1D/2D/3D, their Transposes, DepthwiseConv1D/2D and
// SeparableConv1D/2D. Every option Keras 2 (2.0 ... 2.15) and Keras 3 write for these classes is
// read: data_format must be channels_last, groups 1, constraints, activity regularizers and
// LoRA/DoRA null.
#include <algorithm>

#include "trainer/keras/window_options.h"
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::convolutional {
namespace {

using graph::Layer;
using graph::Padding;
using keras::ChannelsLast;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::NoLowRank;
using keras::ReadPadding;
using keras::ReadPositive;
using keras::ReadStrides;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

int64_t ReadFilters(LayerConfig& c) {
  const int64_t f = c.Int("filters", 0);
  if (f <= 0) c.Error("option filters must be a positive integer");
  return std::max<int64_t>(f, 1);
}

LayerOr Conv(LayerConfig& c, int rank) {
  graph::ConvOptions o;
  o.rank = rank;
  o.filters = ReadFilters(c);
  o.kernel_size = ReadPositive(c, "kernel_size", rank, 0);
  o.strides = ReadPositive(c, "strides", rank, 1);
  o.dilation_rate = ReadPositive(c, "dilation_rate", rank, 1);
  o.padding = ReadPadding(c, rank == 1);
  ChannelsLast(c);
  c.Expect("groups", 1);
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
  NoLowRank(c);
  return graph::MakeConv(c.name(), o);
}

LayerOr ConvTranspose(LayerConfig& c, int rank) {
  graph::ConvTransposeOptions o;
  o.rank = rank;
  o.filters = ReadFilters(c);
  o.kernel_size = ReadPositive(c, "kernel_size", rank, 0);
  o.strides = ReadPositive(c, "strides", rank, 1);
  const std::vector<int64_t> dilation = ReadPositive(c, "dilation_rate", rank, 1);
  if (std::any_of(dilation.begin(), dilation.end(), [](int64_t d) { return d != 1; })) {
    c.Refuse("option dilation_rate=" + ShapeString(dilation));
  }
  o.padding = ReadPadding(c, false);
  if (c.Has("output_padding")) {
    std::vector<int64_t> op = c.Ints("output_padding", static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < op.size(); ++i) {
      if (op[i] < 0 || op[i] >= o.strides[i]) {
        c.Error("option output_padding=" + ShapeString(op) +
                " must be non-negative and less than the strides " + ShapeString(o.strides));
      }
    }
    o.output_padding = op;
  } else {
    c.Ignore("output_padding");
  }
  ChannelsLast(c);
  c.Expect("groups", 1);
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
  NoLowRank(c);
  return graph::MakeConvTranspose(c.name(), o);
}

LayerOr DepthwiseConv(LayerConfig& c, int rank) {
  graph::DepthwiseOptions o;
  o.rank = rank;
  c.Expect("filters", nullptr);  // Keras 2's base class carries it as None
  o.kernel_size = ReadPositive(c, "kernel_size", rank, 0);
  o.strides = ReadPositive(c, "strides", rank, 1);
  o.dilation_rate = ReadPositive(c, "dilation_rate", rank, 1);
  o.padding = ReadPadding(c, false);
  o.depth_multiplier = c.Int("depth_multiplier", 1);
  if (o.depth_multiplier <= 0) {
    c.Error("option depth_multiplier must be positive");
    o.depth_multiplier = 1;
  }
  ChannelsLast(c);
  c.Expect("groups", 1);
  o.activation = c.Activation("activation", "linear");
  o.use_bias = c.Bool("use_bias", true);
  o.depthwise_initializer = c.Initializer("depthwise_initializer", graph::GlorotUniform());
  o.bias_initializer = c.Initializer("bias_initializer", graph::Zeros());
  const Regularizer dr = c.Regularization("depthwise_regularizer");
  const Regularizer br = c.Regularization("bias_regularizer");
  o.depthwise_l1 = dr.l1;
  o.depthwise_l2 = dr.l2;
  o.bias_l1 = br.l1;
  o.bias_l2 = br.l2;
  c.ExpectNull({"depthwise_constraint", "bias_constraint"});
  return graph::MakeDepthwiseConv(c.name(), o);
}

LayerOr SeparableConv(LayerConfig& c, int rank) {
  graph::SeparableOptions o;
  o.rank = rank;
  o.filters = ReadFilters(c);
  o.kernel_size = ReadPositive(c, "kernel_size", rank, 0);
  o.strides = ReadPositive(c, "strides", rank, 1);
  o.dilation_rate = ReadPositive(c, "dilation_rate", rank, 1);
  o.padding = ReadPadding(c, rank == 1);
  o.depth_multiplier = c.Int("depth_multiplier", 1);
  if (o.depth_multiplier <= 0) {
    c.Error("option depth_multiplier must be positive");
    o.depth_multiplier = 1;
  }
  ChannelsLast(c);
  c.Expect("groups", 1);
  o.activation = c.Activation("activation", "linear");
  o.use_bias = c.Bool("use_bias", true);
  o.depthwise_initializer = c.Initializer("depthwise_initializer", graph::GlorotUniform());
  o.pointwise_initializer = c.Initializer("pointwise_initializer", graph::GlorotUniform());
  o.bias_initializer = c.Initializer("bias_initializer", graph::Zeros());
  const Regularizer dr = c.Regularization("depthwise_regularizer");
  const Regularizer pr = c.Regularization("pointwise_regularizer");
  const Regularizer br = c.Regularization("bias_regularizer");
  o.depthwise_l1 = dr.l1;
  o.depthwise_l2 = dr.l2;
  o.pointwise_l1 = pr.l1;
  o.pointwise_l2 = pr.l2;
  o.bias_l1 = br.l1;
  o.bias_l2 = br.l2;
  c.ExpectNull({"depthwise_constraint", "pointwise_constraint", "bias_constraint"});
  return graph::MakeSeparableConv(c.name(), o);
}

}  // namespace

void RegisterKeras(Registry& r) {
  keras::AddRanks(&r.keras(), "Conv", "", {1, 2, 3}, Conv);
  keras::AddRanks(&r.keras(), "Conv", "Transpose", {1, 2, 3}, ConvTranspose);
  keras::AddRanks(&r.keras(), "DepthwiseConv", "", {1, 2}, DepthwiseConv);
  keras::AddRanks(&r.keras(), "SeparableConv", "", {1, 2}, SeparableConv);
}

}  // namespace lockstep::trainer::layers::convolutional
