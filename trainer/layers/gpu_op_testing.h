#pragma once
// What the families' GPU tests (layers/<family>/*_gpu_test.cc, the ctest binary
// trainer_graph_gpu_test, label gpu) share: a fixture with a GPU context that skips the test
// where no GPU is visible, random and poisoned (NaN) tensors, and a CPU layer's forward and
// backward pass to compare with (op_test_util.h has the tolerances and the relative error).
// Test-only; CUDA builds.

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "trainer/graph/activation.h"
#include "trainer/graph/layer.h"
#include "trainer/kernels/cuda/device.h"
#include "trainer/kernels/cuda/gpu_available.h"
#include "trainer/kernels/cuda/op_test_util.h"

namespace lockstep::trainer::cuda {

// Convolutions: cuDNN may pick Winograd or FFT algorithms, whose fp32 results differ from a
// direct sum by more than rounding alone (1e-4 still catches any wrong index).
inline double ConvTolerance(DType t) { return t == DType::kF32 ? 1e-4 : Tolerance(t); }

class GraphCudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuCountResult n = GpuCount();
    if (n.count == 0) GTEST_SKIP() << n.why_none;
    absl::StatusOr<std::unique_ptr<GpuContext> > c = GpuContext::Create(0, {.tf32 = false});
    ASSERT_TRUE(c.ok()) << c.status();
    ctx_ = std::move(*c);
    rng_.seed(static_cast<uint32_t>(std::random_device{}()));
  }
  Tensor Random(Shape shape, float lo, float hi) {
    return cuda::Random(std::move(shape), &rng_, lo, hi);
  }
  void Poison(DeviceTensor* t) {
    ASSERT_EQ(cudaMemsetAsync(t->data(), 0xff, t->bytes(), ctx_->stream()), cudaSuccess);
  }

  std::unique_ptr<GpuContext> ctx_;
  std::mt19937 rng_;
};

// Every activation the loader accepts, with the alpha its layer or name gives it.
inline std::vector<Activation> AllActivations() {
  std::vector<Activation> out;
  for (Act k : {Act::kLinear, Act::kRelu, Act::kRelu6, Act::kSigmoid, Act::kHardSigmoid2,
                Act::kHardSigmoid3, Act::kTanh, Act::kSoftmax, Act::kSwish, Act::kGelu,
                Act::kGeluTanh, Act::kElu, Act::kSelu, Act::kSoftplus, Act::kSoftsign,
                Act::kExponential, Act::kLeakyRelu, Act::kHardSwish, Act::kMish}) {
    out.push_back({k, k == Act::kElu ? 1.0f : k == Act::kLeakyRelu ? 0.2f : 0.0f});
  }
  return out;
}

// A CPU layer's forward and backward pass on x and dy: y, dx, then each weight's value after
// the call (moving statistics move in training) and gradient.
struct LayerRun {
  Tensor y, dx;
  std::vector<Tensor> values, grads;
};
// `mask`: the input's [batch, time] mask, or null.
inline LayerRun RunCpuLayer(graph::Layer& l, const Tensor& x, const Tensor& dy, bool training,
                            const Tensor* mask = nullptr) {
  std::mt19937_64 rng(3);
  std::vector<Tensor> out(1), din(1);
  graph::Saved s;
  l.Forward(graph::Args{{&x}, {mask}}, &out, &s, graph::CallContext{training, &rng});
  for (graph::Weight& w : l.weights()) w.grad.Fill(0.0f);
  l.Backward(graph::Args{{&x}, {mask}}, out, {&dy}, {true}, &din, &s);
  LayerRun r{out[0], din[0], {}, {}};
  for (const graph::Weight& w : l.weights()) {
    r.values.push_back(w.value);
    r.grads.push_back(w.grad);
  }
  return r;
}

// A CPU layer of several inputs: y and each input's gradient.
inline std::vector<Tensor> RunCpuMulti(graph::Layer& l, const std::vector<Tensor>& x,
                                       const Tensor& dy) {
  std::mt19937_64 rng(3);
  std::vector<Shape> shapes;
  std::vector<const Tensor*> in;
  for (const Tensor& t : x) {
    shapes.push_back(Shape(t.shape().begin() + 1, t.shape().end()));
    in.push_back(&t);
  }
  EXPECT_TRUE(l.Build(shapes, graph::BuildContext{&rng}).ok());
  std::vector<Tensor> out(1), din(x.size());
  graph::Saved s;
  const graph::Args args{in, std::vector<const Tensor*>(x.size(), nullptr)};
  l.Forward(args, &out, &s, graph::CallContext{true, &rng});
  l.Backward(args, out, {&dy}, std::vector<bool>(x.size(), true), &din, &s);
  std::vector<Tensor> r{out[0]};
  for (Tensor& d : din) r.push_back(d);
  return r;
}

}  // namespace lockstep::trainer::cuda
