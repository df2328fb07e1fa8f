#pragma once
// Finite-difference checks of a layer's or a graph's backward pass, for tests. The loss is a
// fixed random projection of the outputs, L = sum_k <out_k, r_k>, so every output element
// carries gradient; central differences of L at sampled coordinates of every input and weight
// are compared with what Backward computed (a disagreement is confirmed at steps down to
// eps/32, and by Richardson extrapolation, before it is reported). Forward runs with a freshly
// seeded generator each time, so Dropout and noise draw the same masks in every evaluation.
// Thread-safety: test code, one thread.

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/graph/graph.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph::testing {

struct GradCheckOptions {
  bool training = true;
  float eps = 1e-2f;
  double tolerance = 2e-2;  // |analytic - numeric| <= tolerance * max(1, |numeric|)
  int samples = 12;         // coordinates per tensor
  int max_tensors = 0;      // graphs: check at most this many weight tensors, spread out (0: all)
  uint64_t seed = 7;
  std::vector<const Tensor*> masks;  // input masks (null: none)
};

// Builds the layer for the inputs' shapes (batch dropped; a built layer checks them), then
// checks it. Returns
// "" when every sampled coordinate agrees, else a line per disagreement.
std::string CheckLayerGradients(Layer& layer, const std::vector<Tensor>& inputs,
                                const GradCheckOptions& o = {});

// The same over a whole graph (inputs are never differentiated; the weights are).
std::string CheckGraphGradients(Graph& g, const std::vector<Tensor>& inputs,
                                const GradCheckOptions& o = {});

// A tensor of `shape` with values uniform in [lo, hi) from `seed`.
Tensor RandomTensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace lockstep::trainer::graph::testing
