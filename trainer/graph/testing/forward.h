#pragma once
// A layer from its Keras config, and forward passes of a freshly built layer: for the layer
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

// One forward call of a layer built for the inputs' per-example shapes (the build must
// succeed): its outputs, what it saved, and the error it reported through the CallContext.
struct LayerCall {
  std::vector<Tensor> out;
  Saved saved;
  std::string error;
};
inline LayerCall RunLayer(Layer& l, const std::vector<Tensor>& x,
                          std::vector<const Tensor*> masks = {}, bool training = false,
                          uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<Shape> shapes;
  for (const Tensor& t : x) shapes.push_back(PerExample(t));
  absl::StatusOr<std::vector<Shape>> built = l.Build(shapes, BuildContext{&rng});
  EXPECT_TRUE(built.ok()) << built.status();
  LayerCall c;
  if (!built.ok()) return c;
  c.out.resize(built->size());
  Args a;
  for (size_t i = 0; i < x.size(); ++i) {
    a.x.push_back(&x[i]);
    a.mask.push_back(i < masks.size() ? masks[i] : nullptr);
  }
  l.Forward(a, &c.out, &c.saved, CallContext{training, &rng, &c.error});
  return c;
}

// The names of a layer's weights, in order.
inline std::vector<std::string> WeightNames(const Layer& l) {
  std::vector<std::string> out;
  for (const Weight& w : l.weights()) out.push_back(w.name);
  return out;
}

inline std::vector<float> Values(const Tensor& t) { return t.values(); }

// A [batch, time] mask from each sequence's list of 0/1.
inline Tensor MaskOf(std::vector<std::vector<float>> rows) {
  const auto b = static_cast<int64_t>(rows.size());
  const auto t = static_cast<int64_t>(rows[0].size());
  std::vector<float> v;
  for (const auto& r : rows) v.insert(v.end(), r.begin(), r.end());
  return Tensor({b, t}, v);
}

// One forward and backward pass of layer `l` (built by the call) on x with output gradients
// dy: every output, every input's gradient, then each weight's value and gradient (a training
// pass moves BatchNormalization's statistics), in order, for comparing runs bit for bit.
inline std::vector<Tensor> ForwardBackward(Layer& l, const std::vector<Tensor>& x,
                                           const std::vector<Tensor>& dy, bool training,
                                           std::vector<const Tensor*> masks = {}) {
  LayerCall c = RunLayer(l, x, masks, training);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.out.size(), dy.size());
  if (!c.error.empty() || c.out.size() != dy.size()) return {};
  Args a;
  for (size_t i = 0; i < x.size(); ++i) {
    a.x.push_back(&x[i]);
    a.mask.push_back(i < masks.size() ? masks[i] : nullptr);
  }
  std::vector<const Tensor*> dout;
  for (const Tensor& t : dy) dout.push_back(&t);
  std::vector<Tensor> din(x.size());
  l.Backward(a, c.out, dout, std::vector<bool>(x.size(), true), &din, &c.saved);
  std::vector<Tensor> all = std::move(c.out);
  for (Tensor& t : din) all.push_back(std::move(t));
  for (const Weight& w : l.weights()) {
    all.push_back(w.value);
    all.push_back(w.grad);
  }
  return all;
}

// The layer a Keras layer config (JSON text) builds.
inline absl::StatusOr<std::unique_ptr<Layer>> FromJson(const std::string& text,
                                                       bool keras3 = false) {
  return keras::LayerFactories::Get().Build(nlohmann::json::parse(text), keras3);
}

}  // namespace lockstep::trainer::graph::testing
