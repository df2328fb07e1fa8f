#pragma once
// The layers that change only the shape: Flatten, Reshape, RepeatVector; and the spatial ones,
// channels-last (spatial.cc): ZeroPadding, Cropping and UpSampling 1D-3D (nearest; 2D also
// bilinear with TensorFlow's half-pixel centres), which drop the mask as Keras's do.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct ReshapeOptions {
  Shape target;  // Reshape's (empty for Flatten)
  bool flatten = false;
};
std::unique_ptr<Layer> MakeFlatten(std::string name);
// Reshape to `target` (per example; one -1 is inferred).
std::unique_ptr<Layer> MakeReshape(std::string name, Shape target);
struct RepeatOptions {
  int64_t n = 1;
};
// [batch, d] -> [batch, n, d].
std::unique_ptr<Layer> MakeRepeatVector(std::string name, int64_t n);

enum class Interpolation { kNearest, kBilinear };

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
