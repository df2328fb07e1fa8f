#pragma once
// The options the windowed layers' Keras factories share (the convolutions, pooling, padding,
// cropping and upsampling): padding, window sizes and strides, data_format, and one factory
// per rank (Conv1D, Conv2D, Conv3D).
// Thread-safety: as LayerConfig.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "trainer/keras/layer_config.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/layers/convolutional/convolutional.h"

namespace lockstep::trainer::keras {

// Keras 3's low-rank adaptation of a kernel (written only when enabled): must be off.
void NoLowRank(LayerConfig& c);
// padding "valid" or "same" (any case: Keras 3 lower-cases it), or "causal" where allowed.
graph::Padding ReadPadding(LayerConfig& c, bool allow_causal);
// An int or `rank` ints, each positive; `def` when absent (required when def is 0).
std::vector<int64_t> ReadPositive(LayerConfig& c, const std::string& key, int rank, int64_t def);
// strides absent or null: `def` (pooling: the pool size).
std::vector<int64_t> ReadStrides(LayerConfig& c, int rank, const std::vector<int64_t>& def);
// data_format must be channels_last (absent or null: Keras's default, channels_last).
void ChannelsLast(LayerConfig& c);

// Adds `make` as the factory of base + "1D"/"2D"/"3D" + suffix for each rank.
template <typename F>
void AddRanks(LayerFactories* f, const std::string& base, const std::string& suffix,
              std::initializer_list<int> ranks, F make) {
  for (int rank : ranks) {
    f->Add(base + std::to_string(rank) + "D" + suffix,
           [rank, make](LayerConfig& c, const LayerFactories&) { return make(c, rank); });
  }
}

}  // namespace lockstep::trainer::keras
