// The core layers against finite differences and their defining formulas.
#include "trainer/layers/core/core.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/regularization/regularization.h"
#include "trainer/layers/reshaping/reshaping.h"

#include <gtest/gtest.h>

#include "trainer/graph/testing/forward.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/kernels/cpu/threads.h"

namespace lockstep::trainer::graph {
namespace {

using testing::CheckLayerGradients;
using testing::ForwardBackward;
using testing::RandomTensor;

TEST(CoreLayersTest, DenseComputesXKernelPlusBias) {
  DenseOptions o;
  o.units = 2;
  auto d = MakeDense("d", o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(d->Build({{3}}, BuildContext{&rng}).ok());
  d->weights()[0].value = Tensor({3, 2}, {1, 2, 3, 4, 5, 6});  // [in, out]
  d->weights()[1].value = Tensor({2}, {0.5f, -0.5f});
  Tensor x({1, 3}, {1, 1, 2});
  std::vector<Tensor> out(1);
  Saved s;
  d->Forward(Args{{&x}, {nullptr}}, &out, &s, CallContext{});
  EXPECT_EQ(out[0], Tensor({1, 2}, {1 + 3 + 10 + 0.5f, 2 + 4 + 12 - 0.5f}));
}

TEST(CoreLayersTest, DenseGradientsOnRank3InputsAndEveryActivation) {
  for (const char* a : {"linear", "relu", "sigmoid", "tanh", "softmax", "swish", "gelu", "elu",
                        "selu", "softplus", "hard_sigmoid", "relu6", "softsign", "mish"}) {
    DenseOptions o;
    o.units = 4;
    o.activation = *ParseActivation(a, false);
    auto d = MakeDense("d", o);
    EXPECT_EQ(CheckLayerGradients(*d, {RandomTensor({2, 3, 5}, 3)}), "") << a;
  }
}

TEST(CoreLayersTest, HardSigmoidDiffersBetweenKerasVersions) {
  Tensor z({1, 1}, 2.0f);
  Tensor y;
  ActivationForward(*ParseActivation("hard_sigmoid", false), z, &y);
  EXPECT_FLOAT_EQ(y[0], 0.9f);  // 0.2 * 2 + 0.5
  ActivationForward(*ParseActivation("hard_sigmoid", true), z, &y);
  EXPECT_FLOAT_EQ(y[0], 2.0f / 6.0f + 0.5f);
  EXPECT_FALSE(ParseActivation("crelu", false).ok());
}

// The activations split their elements (softmax its rows) over the kernels' threads: every
// kind gives the one-thread values and gradients bit for bit at 2 and 3 threads, on a size
// that splits (and an odd one, so the ranges are uneven), with y written over z in place.
TEST(CoreLayersTest, ActivationsSplitOverThreadsEqualOneThread) {
  for (const char* name :
       {"linear", "relu", "relu6", "sigmoid", "hard_sigmoid", "tanh", "softmax", "swish", "gelu",
        "elu", "selu", "softplus", "softsign", "exponential", "leaky_relu", "hard_swish", "mish"}) {
    const Activation a = *ParseActivation(name, false);
    for (const Shape& shape : {Shape{64, 1031}, Shape{3, 17, 4099}}) {
      const Tensor z = RandomTensor(shape, 5);
      const Tensor dy = RandomTensor(shape, 6);
      std::vector<Tensor> ys, dzs, in_place;
      for (int threads : {1, 2, 3}) {
        cpu::SetCpuThreads(threads);
        Tensor y, dz;
        ActivationForward(a, z, &y);
        ActivationBackward(a, z, y, dy, &dz);
        Tensor w = z;
        ActivationForward(a, w, &w);
        ys.push_back(y);
        dzs.push_back(dz);
        in_place.push_back(w);
      }
      // The Activation layer (ReLU's backward has its own loop there) gives the same again.
      std::vector<Tensor> layer_run;
      for (int threads : {1, 3}) {
        cpu::SetCpuThreads(threads);
        auto l = MakeActivation("a", "Activation", a);
        const std::vector<Tensor> run = ForwardBackward(*l, {z}, {dy}, true);
        ASSERT_EQ(run.size(), 2u);
        EXPECT_EQ(run[0], ys[0]) << name << " layer, " << threads << " threads";
        EXPECT_EQ(run[1], dzs[0]) << name << " layer, " << threads << " threads";
      }
      cpu::SetCpuThreads(1);
      for (size_t r = 1; r < ys.size(); ++r) {
        EXPECT_EQ(ys[r], ys[0]) << name << ", " << r + 1 << " threads";
        EXPECT_EQ(dzs[r], dzs[0]) << name << ", " << r + 1 << " threads";
      }
      if (a.kind != Act::kSoftmax) {
        for (const Tensor& w : in_place) EXPECT_EQ(w, ys[0]) << name << " in place";
      }
    }
  }
}

TEST(CoreLayersTest, ShapeLayersAndNoiseHaveExactGradients) {
  EXPECT_EQ(CheckLayerGradients(*MakeFlatten("f"), {RandomTensor({2, 3, 4}, 1)}), "");
  EXPECT_EQ(CheckLayerGradients(*MakeReshape("r", {-1, 2}), {RandomTensor({2, 3, 4}, 1)}), "");
  EXPECT_EQ(CheckLayerGradients(*MakeRepeatVector("r", 3), {RandomTensor({2, 4}, 1)}), "");
  EXPECT_EQ(CheckLayerGradients(*MakeDropout("d", 0.5f, {}), {RandomTensor({4, 6}, 1)}), "");
  EXPECT_EQ(CheckLayerGradients(*MakeDropout("d", 0.3f, {1, 5}), {RandomTensor({2, 4, 5}, 1)}), "");
  EXPECT_EQ(CheckLayerGradients(*MakeGaussianNoise("n", 0.1f), {RandomTensor({3, 4}, 1)}), "");
  EXPECT_EQ(CheckLayerGradients(*MakeRescaling("s", {1 / 255.0f}, {-1}), {RandomTensor({3, 4}, 1)}),
            "");
  EXPECT_EQ(CheckLayerGradients(*MakeRescaling("s", {1, 2, 3, 4}, {0}), {RandomTensor({3, 4}, 1)}),
            "");
  EXPECT_EQ(CheckLayerGradients(*MakeRelu("r", 6, 0.1f, 0.2f), {RandomTensor({3, 5}, 2)}), "");
}

TEST(CoreLayersTest, ReshapeRefusesWhatDoesNotFit) {
  std::mt19937_64 rng(1);
  EXPECT_FALSE(MakeReshape("r", {5, -1})->Build({{3, 4}}, BuildContext{&rng}).ok());
  EXPECT_FALSE(MakeReshape("r", {5, 2})->Build({{3, 4}}, BuildContext{&rng}).ok());
  auto r = MakeReshape("r", {2, -1});
  auto out = r->Build({{3, 4}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({2, 6}));
  EXPECT_FALSE(MakeFlatten("f")->Build({{-1, 4}}, BuildContext{&rng}).ok());
}

TEST(CoreLayersTest, DropoutScalesKeptUnitsAndIsIdentityInInference) {
  auto d = MakeDropout("d", 0.25f, {});
  std::mt19937_64 rng(1);
  ASSERT_TRUE(d->Build({{1000}}, BuildContext{&rng}).ok());
  Tensor x({1, 1000}, 1.0f);
  std::vector<Tensor> out(1);
  Saved s;
  d->Forward(Args{{&x}, {nullptr}}, &out, &s, CallContext{true, &rng});
  int kept = 0;
  for (float v : out[0].values()) {
    EXPECT_TRUE(v == 0.0f || std::abs(v - 1 / 0.75f) < 1e-6f);
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept, 750, 60);
  d->Forward(Args{{&x}, {nullptr}}, &out, &s, CallContext{false, &rng});
  EXPECT_EQ(out[0], x);
}

TEST(CoreLayersTest, MergesBroadcastAndDifferentiate) {
  for (MergeOp op : {MergeOp::kAdd, MergeOp::kSubtract, MergeOp::kMultiply, MergeOp::kAverage,
                     MergeOp::kMaximum, MergeOp::kMinimum}) {
    auto m = MakeMerge("m", "Merge", op);
    EXPECT_EQ(CheckLayerGradients(*m, {RandomTensor({2, 3, 4}, 1), RandomTensor({2, 3, 4}, 2)}), "")
        << static_cast<int>(op);
  }
  // A squeeze-and-excitation product: [h, w, c] times [1, 1, c].
  auto m = MakeMerge("m", "Multiply", MergeOp::kMultiply);
  EXPECT_EQ(CheckLayerGradients(*m, {RandomTensor({2, 3, 3, 4}, 1), RandomTensor({2, 1, 1, 4}, 2)}),
            "");
  std::mt19937_64 rng(1);
  EXPECT_FALSE(MakeMerge("m", "Add", MergeOp::kAdd)->Build({{3, 4}, {3, 5}}, {&rng}).ok());
}

// Merges split their rows over the kernels' threads (a broadcast input's gradient in whole
// groups of the rows that share it): the same values and gradients to the bit at any count.
TEST(CoreLayersTest, MergesSplitOverThreadsEqualOneThread) {
  const std::vector<std::vector<Shape>> cases = {
      {{64, 16, 16, 8}, {64, 16, 16, 8}},                   // a residual add
      {{64, 16, 16, 8}, {64, 16, 16, 8}, {64, 16, 16, 8}},  // three inputs
      {{32, 9, 9, 24}, {32, 1, 1, 24}},                     // squeeze-and-excitation
      {{5, 3, 2000}, {5, 1, 2000}},                         // few groups, long rows
  };
  for (MergeOp op : {MergeOp::kAdd, MergeOp::kSubtract, MergeOp::kMultiply, MergeOp::kAverage}) {
    for (const std::vector<Shape>& shapes : cases) {
      if (op == MergeOp::kSubtract && shapes.size() != 2) continue;
      std::vector<Tensor> x;
      for (size_t k = 0; k < shapes.size(); ++k) x.push_back(RandomTensor(shapes[k], 10 + k));
      const std::vector<Tensor> dy = {RandomTensor(shapes[0], 9)};
      std::vector<std::vector<Tensor>> runs;
      for (int threads : {1, 2, 3}) {
        cpu::SetCpuThreads(threads);
        auto m = MakeMerge("m", "Merge", op);
        runs.push_back(ForwardBackward(*m, x, dy, true));
      }
      cpu::SetCpuThreads(1);
      ASSERT_EQ(runs[0].size(), 1 + shapes.size());
      for (size_t r = 1; r < runs.size(); ++r) {
        EXPECT_EQ(runs[r], runs[0])
            << static_cast<int>(op) << ", " << shapes.size() << " inputs, " << r + 1 << " threads";
      }
    }
  }
}

TEST(CoreLayersTest, MaskingMasksStepsWhoseFeaturesAllEqualTheValue) {
  auto m = MakeMasking("m", -1);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(m->Build({{3, 2}}, BuildContext{&rng}).ok());
  Tensor x({1, 3, 2}, {1, 2, -1, -1, -1, 5});
  std::vector<Tensor> y(1);
  Saved s;
  Args a{{&x}, {nullptr}};
  m->Forward(a, &y, &s, CallContext{});
  EXPECT_EQ(y[0], Tensor({1, 3, 2}, {1, 2, 0, 0, -1, 5}));
  EXPECT_EQ(*m->OutputMask(a, s), Tensor({1, 3}, {1, 0, 1}));
  EXPECT_EQ(CheckLayerGradients(*MakeMasking("m", 0), {RandomTensor({2, 4, 3}, 5)}), "");
}

TEST(CoreLayersTest, ConcatenateAlongAnyAxis) {
  for (int64_t axis : {-1, 1, 2}) {
    auto c = MakeConcatenate("c", axis);
    EXPECT_EQ(CheckLayerGradients(*c, {RandomTensor({2, 3, 4}, 1), RandomTensor({2, 3, 4}, 2)}), "")
        << axis;
  }
  auto c = MakeConcatenate("c", -1);
  std::mt19937_64 rng(1);
  auto out = c->Build({{3, 4}, {3, 2}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({3, 6}));
  Tensor a({1, 1, 2}, {1, 2}), b({1, 1, 1}, 3.0f);
  auto c2 = MakeConcatenate("c", -1);
  ASSERT_TRUE(c2->Build({{1, 2}, {1, 1}}, BuildContext{&rng}).ok());
  std::vector<Tensor> y(1);
  Saved s;
  c2->Forward(Args{{&a, &b}, {nullptr, nullptr}}, &y, &s, CallContext{});
  EXPECT_EQ(y[0], Tensor({1, 1, 3}, {1, 2, 3}));
}

}  // namespace
}  // namespace lockstep::trainer::graph
