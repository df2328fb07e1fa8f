// The pooling and spatial reshaping layers' factories (trainer/graph/layers/pooling.h):
// Max/AveragePooling1D/2D/3D, their Global forms, ZeroPadding, Cropping and UpSampling
// 1D/2D/3D. data_format must be channels_last.
#include "trainer/graph/layers/pooling.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/keras/window_options.h"

namespace lockstep::trainer::keras {
namespace {

using graph::Layer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;
using nlohmann::json;

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

}  // namespace

void AddPoolingLayers(LayerFactories* f) {
  AddRanks(f, "MaxPooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return Pooling(c, r, graph::PoolMode::kMax); });
  AddRanks(f, "AveragePooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return Pooling(c, r, graph::PoolMode::kAverage); });
  AddRanks(f, "GlobalMaxPooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return GlobalPooling(c, r, graph::PoolMode::kMax); });
  AddRanks(f, "GlobalAveragePooling", "", {1, 2, 3},
           [](LayerConfig& c, int r) { return GlobalPooling(c, r, graph::PoolMode::kAverage); });
}

void AddSpatialReshapingLayers(LayerFactories* f) {
  AddRanks(f, "ZeroPadding", "", {1, 2, 3}, ZeroPadding);
  AddRanks(f, "Cropping", "", {1, 2, 3}, Cropping);
  AddRanks(f, "UpSampling", "", {1, 2, 3}, UpSampling);
}

}  // namespace lockstep::trainer::keras
