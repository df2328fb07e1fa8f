// The convolution, pooling and spatial shape layers' factories (trainer/graph/layers/conv.h,
// pooling.h). Every option Keras 2 (2.0 ... 2.15) and Keras 3 write for these classes is read:
// data_format must be channels_last (absent or null is Keras's default, channels_last), groups
// 1, constraints, activity regularizers and LoRA/DoRA null.
#include <algorithm>
#include <cctype>

#include "trainer/graph/layers/conv.h"
#include "trainer/graph/layers/pooling.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {
namespace {

using graph::Layer;
using graph::Padding;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;
using nlohmann::json;

// Keras 3's low-rank adaptation of a kernel (written only when enabled).
void NoLowRank(LayerConfig& c) {
  for (const char* k : {"lora_rank", "lora_alpha", "dora_rank", "dora_alpha"}) c.Expect(k, nullptr);
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

Padding ReadPadding(LayerConfig& c, bool allow_causal) {
  const std::string p = c.String("padding", "valid");
  const std::string l = Lower(p);  // Keras 3 lower-cases it
  if (l == "valid") return Padding::kValid;
  if (l == "same") return Padding::kSame;
  if (l == "causal" && allow_causal) return Padding::kCausal;
  c.Refuse("option padding=\"" + p + "\"");
  return Padding::kValid;
}

// An int or `rank` ints, each positive; `def` when absent (required when def is 0).
std::vector<int64_t> ReadPositive(LayerConfig& c, const std::string& key, int rank, int64_t def) {
  if (def == 0 && !c.Has(key)) {
    c.Error("option " + key + " is required");
    c.Ignore(key);
    return std::vector<int64_t>(static_cast<size_t>(rank), 1);
  }
  std::vector<int64_t> v = c.Ints(key, static_cast<size_t>(rank), def);
  if (std::any_of(v.begin(), v.end(), [](int64_t x) { return x <= 0; })) {
    c.Error("option " + key + "=" + ShapeString(v) + " must be positive");
    return std::vector<int64_t>(static_cast<size_t>(rank), 1);
  }
  return v;
}

// strides absent or null: `def` (pooling: the pool size).
std::vector<int64_t> ReadStrides(LayerConfig& c, int rank, const std::vector<int64_t>& def) {
  if (!c.Has("strides")) {
    c.Ignore("strides");
    return def;
  }
  return ReadPositive(c, "strides", rank, 1);
}

void ChannelsLast(LayerConfig& c) { c.Expect("data_format", "channels_last"); }

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

LayerOr Pooling(LayerConfig& c, int rank, graph::PoolMode mode) {
  graph::PoolOptions o;
  o.rank = rank;
  o.mode = mode;
  o.pool_size = ReadPositive(c, "pool_size", rank, 2);
  o.strides = ReadStrides(c, rank, o.pool_size);
  o.padding = ReadPadding(c, false);
  ChannelsLast(c);
  return graph::MakePooling(c.name(), o);
}

LayerOr GlobalPooling(LayerConfig& c, int rank, graph::PoolMode mode) {
  ChannelsLast(c);
  const bool keepdims = c.Bool("keepdims", false);
  return graph::MakeGlobalPooling(c.name(), rank, mode, keepdims);
}

// ZeroPadding's and Cropping's amounts: an int (every side), `rank` ints (symmetric per axis;
// for rank 1 a pair is (before, after)), or `rank` pairs.
graph::AxisPairs ReadPairs(LayerConfig& c, const std::string& key, int rank, int64_t def) {
  const auto r = static_cast<size_t>(rank);
  graph::AxisPairs out(r, {def, def});
  const json v = c.Object(key);
  if (v.is_null()) return out;
  auto bad = [&] {
    c.Error("option " + key + "=" + Show(v) + " is not an integer, " + std::to_string(rank) +
            " integers or " + std::to_string(rank) + " pairs");
    return graph::AxisPairs(r, {0, 0});
  };
  if (v.is_number_integer()) {
    out.assign(r, {v.get<int64_t>(), v.get<int64_t>()});
  } else if (v.is_array() && rank == 1 && v.size() == 2 && v[0].is_number_integer() &&
             v[1].is_number_integer()) {
    out[0] = {v[0].get<int64_t>(), v[1].get<int64_t>()};
  } else if (v.is_array() && v.size() == r) {
    for (size_t i = 0; i < r; ++i) {
      const json& e = v[i];
      if (e.is_number_integer()) {
        out[i] = {e.get<int64_t>(), e.get<int64_t>()};
      } else if (e.is_array() && e.size() == 2 && e[0].is_number_integer() &&
                 e[1].is_number_integer()) {
        out[i] = {e[0].get<int64_t>(), e[1].get<int64_t>()};
      } else {
        return bad();
      }
    }
  } else {
    return bad();
  }
  for (const auto& [a, b] : out) {
    if (a < 0 || b < 0) {
      c.Error("option " + key + "=" + Show(v) + " must not be negative");
      return graph::AxisPairs(r, {0, 0});
    }
  }
  return out;
}

LayerOr ZeroPadding(LayerConfig& c, int rank) {
  graph::AxisPairs p = ReadPairs(c, "padding", rank, 1);
  ChannelsLast(c);
  return graph::MakeZeroPadding(c.name(), rank, std::move(p));
}

LayerOr Cropping(LayerConfig& c, int rank) {
  graph::AxisPairs p = ReadPairs(c, "cropping", rank, rank == 2 ? 0 : 1);
  ChannelsLast(c);
  return graph::MakeCropping(c.name(), rank, std::move(p));
}

LayerOr UpSampling(LayerConfig& c, int rank) {
  std::vector<int64_t> size = ReadPositive(c, "size", rank, 2);
  graph::Interpolation interp = graph::Interpolation::kNearest;
  ChannelsLast(c);
  if (rank == 2) {
    const std::string i = c.String("interpolation", "nearest");
    if (i == "bilinear") {
      interp = graph::Interpolation::kBilinear;
    } else if (i != "nearest") {
      c.Refuse("option interpolation=\"" + i + "\"");
    }
  }
  return graph::MakeUpSampling(c.name(), rank, std::move(size), interp);
}

template <typename F>
void AddRanks(LayerFactories* f, const std::string& base, const std::string& suffix,
              std::initializer_list<int> ranks, F make) {
  for (int rank : ranks) {
    f->Add(base + std::to_string(rank) + "D" + suffix,
           [rank, make](LayerConfig& c, const LayerFactories&) { return make(c, rank); });
  }
}

}  // namespace

void AddConvolutionLayers(LayerFactories* f) {
  AddRanks(f, "Conv", "", {1, 2, 3}, Conv);
  AddRanks(f, "Conv", "Transpose", {1, 2, 3}, ConvTranspose);
  AddRanks(f, "DepthwiseConv", "", {1, 2}, DepthwiseConv);
  AddRanks(f, "SeparableConv", "", {1, 2}, SeparableConv);
  AddRanks(f, "MaxPooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return Pooling(c, r, graph::PoolMode::kMax); });
  AddRanks(f, "AveragePooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return Pooling(c, r, graph::PoolMode::kAverage); });
  AddRanks(f, "GlobalMaxPooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return GlobalPooling(c, r, graph::PoolMode::kMax); });
  AddRanks(f, "GlobalAveragePooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return GlobalPooling(c, r, graph::PoolMode::kAverage); });
  AddRanks(f, "ZeroPadding", "", {1, 2, 3}, ZeroPadding);
  AddRanks(f, "Cropping", "", {1, 2, 3}, Cropping);
  AddRanks(f, "UpSampling", "", {1, 2, 3}, UpSampling);
}

}  // namespace lockstep::trainer::keras
