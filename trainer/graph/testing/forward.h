#pragma once
// A layer from its Keras config, and one forward pass of a freshly built layer: for the layer
// tests.
// Thread-safety: test code, one thread.

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "trainer/graph/layer.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::graph::testing {

// A batch's per-example shape: its shape without the batch dimension.
inline Shape PerExample(const Tensor& x) { return Shape(x.shape().begin() + 1, x.shape().end()); }

// Builds `l` for x's per-example shape (the build must succeed) and runs one forward pass, in
// training mode when `training`, with `mask` as the input's mask.
inline Tensor Forward1(Layer& l, const Tensor& x, bool training = false,
                       const Tensor* mask = nullptr) {
  std::mt19937_64 rng(1);
  EXPECT_TRUE(l.Build({PerExample(x)}, BuildContext{&rng}).ok());
  std::vector<Tensor> out(1);
  Saved s;
  l.Forward(Args{{&x}, {mask}}, &out, &s, CallContext{training, &rng});
  return out[0];
}

// The layer a Keras layer config (JSON text) builds.
inline absl::StatusOr<std::unique_ptr<Layer>> FromJson(const std::string& text,
                                                       bool keras3 = false) {
  return keras::LayerFactories::Get().Build(nlohmann::json::parse(text), keras3);
}

}  // namespace lockstep::trainer::graph::testing
