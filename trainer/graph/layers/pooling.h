#pragma once
// Pooling and the spatial shape layers, channels-last, as Keras defines them:
// MaxPooling/AveragePooling 1D-3D (strides default to the pool size; "same" pads as the
// convolutions do, more at the end, and an average over a window that reaches into the padding
// divides by the number of real inputs in it, as TensorFlow does), GlobalAverage/GlobalMax
// Pooling 1D-3D, ZeroPadding, Cropping and UpSampling 1D-3D (nearest; 2D also bilinear with
// TensorFlow's half-pixel centres).
//
// Masks: GlobalAveragePooling1D takes a [batch, time] mask and averages over the unmasked steps
// only (an example with every step masked gives 0 where Keras would divide by zero); every
// layer here drops the mask, as Keras's do (none of them supports masking).
// Thread-safety: one thread per layer object (layer.h).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/graph/layer.h"
#include "trainer/layers/convolutional/convolutional.h"

namespace lockstep::trainer::graph {

enum class PoolMode { kMax, kAverage };

struct PoolOptions {
  int rank = 2;
  PoolMode mode = PoolMode::kMax;
  std::vector<int64_t> pool_size{2, 2}, strides{2, 2};
  Padding padding = Padding::kValid;  // valid or same
};
// MaxPooling1D/2D/3D, AveragePooling1D/2D/3D.
std::unique_ptr<Layer> MakePooling(std::string name, PoolOptions o);

enum class Interpolation { kNearest, kBilinear };

struct GlobalPoolOptions {
  int rank = 1;
  PoolMode mode = PoolMode::kAverage;
  bool keepdims = false;
};
// GlobalMaxPooling1D/2D/3D, GlobalAveragePooling1D/2D/3D: [batch, spatial..., c] -> [batch, c]
// ([batch, 1..., c] with keepdims).
std::unique_ptr<Layer> MakeGlobalPooling(std::string name, int rank, PoolMode mode, bool keepdims);

// (before, after) per spatial axis.
using AxisPairs = std::vector<std::pair<int64_t, int64_t>>;
struct PadCropOptions {
  int rank = 2;
  AxisPairs pairs;
  bool pad = true;  // ZeroPadding; false: Cropping
};
struct UpSamplingOptions {
  int rank = 2;
  std::vector<int64_t> size;
  Interpolation interpolation = Interpolation::kNearest;
};
// ZeroPadding1D/2D/3D: zeros added before and after each spatial axis.
std::unique_ptr<Layer> MakeZeroPadding(std::string name, int rank, AxisPairs padding);
// Cropping1D/2D/3D: positions removed from the start and end of each spatial axis.
std::unique_ptr<Layer> MakeCropping(std::string name, int rank, AxisPairs cropping);

// UpSampling1D/2D/3D: each spatial axis repeated `size` times (nearest), or, for 2D, bilinear
// resizing to size times the input (tf.image.resize: half-pixel centres, edges clamped).
std::unique_ptr<Layer> MakeUpSampling(std::string name, int rank, std::vector<int64_t> size,
                                      Interpolation interpolation);

}  // namespace lockstep::trainer::graph
