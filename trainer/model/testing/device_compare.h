#pragma once
// The GPU tests' comparison of a model's DeviceGraph with the CPU graph it mirrors: the same
// weights and batch give the same loss, correct count and gradients, and the kept statistics
// move alike; in fp32 with TF32 off to 1e-4, in bf16 and fp16 to the 16-bit tolerances.
// Test-only (GoogleTest); CUDA builds.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "trainer/model/device_graph.h"
#include "trainer/model/graph_model.h"

namespace lockstep::trainer::testing {

// A batch of the model's examples: token ids below the vocabulary, values in [-1, 1)
// elsewhere, and labels of its classes.
inline std::pair<Tensor, std::vector<int32_t>> DeviceBatch(GraphModel& m, int64_t n,
                                                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  Shape s{n};
  for (int64_t d : m.example_shape()) s.push_back(d);
  Tensor x(s);
  if (m.vocabulary() > 0) {
    std::uniform_int_distribution<int64_t> d(0, m.vocabulary() - 1);
    for (float& v : x.values()) v = static_cast<float>(d(rng));
  } else {
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& v : x.values()) v = d(rng);
  }
  std::uniform_int_distribution<int32_t> c(0, static_cast<int32_t>(m.classes()) - 1);
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int32_t& v : y) v = c(rng);
  return {x, y};
}

inline double RelativeError(const std::vector<Tensor>& got, const std::vector<Tensor*>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    for (int64_t j = 0; j < want[i]->size(); ++j) {
      const double g = got[i][j], w = (*want[i])[j];
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      diff += (g - w) * (g - w);
      norm += w * w;
    }
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Compares one evaluation and one training step of `m` on `dev` (made from it) with the CPU's,
// on a batch drawn from `seed`. A model with noise layers (Dropout, GaussianNoise) is compared
// in inference only: the devices' draws differ (the distribution is the contract).
inline void ExpectDeviceMatchesCpu(GraphModel& m, DeviceGraph& dev, cuda::DType t, uint64_t seed) {
  auto [x, y] = DeviceBatch(m, 6, seed);
  Dataset batch{.inputs = {x}, .targets = {Tensor()}};
  m.Targets(y, &batch.targets[0]);
  const double tol = t == cuda::DType::kF32 ? 1e-4 : (t == cuda::DType::kF16 ? 2e-2 : 6e-2);

  // Inference: no noise, the moving statistics.
  const StepResult he = m.Evaluate(batch);
  absl::StatusOr<cuda::LossResult> de = dev.Evaluate(x, y);
  ASSERT_TRUE(de.ok()) << de.status();
  EXPECT_NEAR(de->loss, he.loss, tol * std::max(1.0, std::abs(he.loss)));
  if (t == cuda::DType::kF32) {
    EXPECT_EQ(de->correct, he.correct);
  }
  for (const auto& l : m.graph().layers()) {
    if (l->class_name() == "Dropout" || l->class_name() == "GaussianNoise") {
      absl::StatusOr<cuda::LossResult> dt = dev.TrainStep(x, y, 1.0f);
      ASSERT_TRUE(dt.ok()) << dt.status();
      EXPECT_TRUE(std::isfinite(dt->loss));
      return;
    }
  }

  // Training: the loss, every gradient (times the loss scale), the moving statistics.
  const float scale = t == cuda::DType::kF16 ? 64.0f : 1.0f;
  const StepResult ht = m.TrainStep(batch);
  std::vector<Tensor> host_grads, host_state;
  for (Tensor* g : m.Grads()) host_grads.push_back(*g);
  for (Tensor* s : m.State()) host_state.push_back(*s);
  absl::StatusOr<cuda::LossResult> dt = dev.TrainStep(x, y, scale);
  ASSERT_TRUE(dt.ok()) << dt.status();
  EXPECT_NEAR(dt->loss, ht.loss, tol * std::max(1.0, std::abs(ht.loss)));
  DeviceParams& w = dev.weights();
  ASSERT_TRUE(w.StoreFlat(w.grads(), m.Grads()).ok());
  for (Tensor* g : m.Grads()) {
    for (float& v : g->values()) v /= scale;
  }
  EXPECT_LT(RelativeError(host_grads, m.Grads()), t == cuda::DType::kF32 ? 1e-3 : 0.1);
  ASSERT_TRUE(w.Store().ok());
  if (!host_state.empty()) {
    EXPECT_LT(RelativeError(host_state, m.State()), tol);
  }
}

}  // namespace lockstep::trainer::testing
