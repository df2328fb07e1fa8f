#pragma once
// The regularization layers: Dropout and GaussianNoise, identities outside training.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct DropoutOptions {
  float rate = 0;
  Shape noise_shape;
};
struct GaussianNoiseOptions {
  float stddev = 0;
};

// Inverted dropout in training (kept units scaled by 1/(1-rate)); identity otherwise.
// `noise_shape` (per example, 1 = broadcast along that axis; empty: none) as Keras's.
std::unique_ptr<Layer> MakeDropout(std::string name, float rate, Shape noise_shape);
// Adds N(0, stddev) noise in training.
std::unique_ptr<Layer> MakeGaussianNoise(std::string name, float stddev);

}  // namespace lockstep::trainer::graph
