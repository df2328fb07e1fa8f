// The poolings' Keras factories: Max/AveragePooling1D/2D/3D and their Global forms.
// data_format must be channels_last.
#include "trainer/keras/layer_factory.h"
#include "trainer/keras/window_options.h"
#include "trainer/layers/pooling/pooling.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers::pooling {
namespace {

using graph::Layer;
using keras::ChannelsLast;
using keras::LayerConfig;
using keras::ReadPadding;
using keras::ReadPositive;
using keras::ReadStrides;
using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

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

}  // namespace

void RegisterKeras(Registry& r) {
  keras::AddRanks(&r.keras(), "MaxPooling", "", {1, 2, 3},
                  [](LayerConfig& c, int k) { return Pooling(c, k, graph::PoolMode::kMax); });
  keras::AddRanks(&r.keras(), "AveragePooling", "", {1, 2, 3},
                  [](LayerConfig& c, int k) { return Pooling(c, k, graph::PoolMode::kAverage); });
  keras::AddRanks(&r.keras(), "GlobalMaxPooling", "", {1, 2, 3},
                  [](LayerConfig& c, int k) { return GlobalPooling(c, k, graph::PoolMode::kMax); });
  keras::AddRanks(&r.keras(), "GlobalAveragePooling", "", {1, 2, 3}, [](LayerConfig& c, int k) {
    return GlobalPooling(c, k, graph::PoolMode::kAverage);
  });
}

}  // namespace lockstep::trainer::layers::pooling
