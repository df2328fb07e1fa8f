#pragma once
// Pooling, channels-last, as Keras defines it: MaxPooling/AveragePooling 1D-3D (strides default
// to the pool size; "same" pads as the convolutions do, more at the end, and an average over a
// window that reaches into the padding divides by the number of real inputs in it, as
// TensorFlow does), GlobalAverage/GlobalMax Pooling 1D-3D.
//
// Masks: GlobalAveragePooling1D takes a [batch, time] mask and averages over the unmasked steps
// only (an example with every step masked gives 0 where Keras would divide by zero); the other
// layers drop the mask, as Keras's do.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <string>
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
// The window geometry of a pooling on an input of batch-first shape `x`, as the CPU layer
// computes it (c_in == c_out; what the GPU's pooling kernels take).
cpu::ConvGeometry PoolGeometry(const PoolOptions& p, const Shape& x);

struct GlobalPoolOptions {
  int rank = 1;
  PoolMode mode = PoolMode::kAverage;
  bool keepdims = false;
};
// GlobalMaxPooling1D/2D/3D, GlobalAveragePooling1D/2D/3D: [batch, spatial..., c] -> [batch, c]
// ([batch, 1..., c] with keepdims).
std::unique_ptr<Layer> MakeGlobalPooling(std::string name, int rank, PoolMode mode, bool keepdims);

}  // namespace lockstep::trainer::graph
