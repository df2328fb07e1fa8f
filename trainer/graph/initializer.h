#pragma once
// Weight initializers as Keras defines them (keras.initializers): the distribution, its scale
// from the weight's fans (Keras's compute_fans: a kernel [..., in, out] has fan_in = in times
// the receptive field, fan_out = out times it), and the seed the config gives. A config seed
// makes the draw reproducible on its own; without one the model's generator is used. The
// values are drawn from the same distribution as Keras's, not the same numbers (Keras draws
// with TensorFlow's or JAX's generators).
// Thread-safety: pure functions over the caller's generator.

#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph {

struct Initializer {
  enum class Kind {
    kZeros,
    kOnes,
    kConstant,
    kRandomNormal,
    kRandomUniform,
    kTruncatedNormal,
    kVarianceScaling,  // GlorotUniform, HeNormal, LecunUniform... are VarianceScaling
    kOrthogonal,
    kIdentity,
  };
  enum class Mode { kFanIn, kFanOut, kFanAvg };
  enum class Distribution { kTruncatedNormal, kUntruncatedNormal, kUniform };
  Kind kind = Kind::kZeros;
  float value = 0;  // Constant; Identity's and Orthogonal's gain
  float mean = 0, stddev = 0.05f;
  float minval = -0.05f, maxval = 0.05f;
  float scale = 1;
  Mode mode = Mode::kFanIn;
  Distribution distribution = Distribution::kTruncatedNormal;
  std::optional<int64_t> seed;
};

Initializer Zeros();
Initializer Ones();
Initializer GlorotUniform();
Initializer RandomUniform(float lo, float hi);
Initializer Orthogonal(float gain = 1);

// Fills a tensor of `shape` (a weight's) from `init`; `rng` serves when init has no seed.
Tensor Initialize(const Initializer& init, const Shape& shape, std::mt19937_64* rng);

}  // namespace lockstep::trainer::graph
