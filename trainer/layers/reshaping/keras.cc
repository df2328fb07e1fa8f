// The reshaping layers' Keras factories (the spatial ones: data_format must be channels_last).
#include <string>
#include <vector>

#include "trainer/keras/layer_factory.h"
#include "trainer/keras/window_options.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::layers::reshaping {
namespace {

using graph::Layer;
using keras::LayerConfig;
using keras::LayerFactories;
using keras::Regularizer;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;
using keras::ChannelsLast;
using keras::ReadPositive;
using keras::Show;
using nlohmann::json;

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

void RegisterKeras(Registry& r) {
  r.keras().Add("Flatten", Flatten);
  r.keras().Add("Reshape", Reshape);
  r.keras().Add("RepeatVector", RepeatVector);
  keras::AddRanks(&r.keras(), "ZeroPadding", "", {1, 2, 3}, ZeroPadding);
  keras::AddRanks(&r.keras(), "Cropping", "", {1, 2, 3}, Cropping);
  keras::AddRanks(&r.keras(), "UpSampling", "", {1, 2, 3}, UpSampling);
}

}  // namespace lockstep::trainer::layers::reshaping
