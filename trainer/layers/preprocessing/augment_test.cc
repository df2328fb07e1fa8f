// Augmentation layers: exact flips, rotations that keep a centred pixel and rotate a quarter
// turn exactly, identity in inference, and gradients through the sampling.
#include "trainer/layers/preprocessing/augment.h"

#include <gtest/gtest.h>

#include <numbers>

#include "trainer/graph/testing/gradcheck.h"

namespace lockstep::trainer::graph {
namespace {

using testing::CheckLayerGradients;
using testing::RandomTensor;

std::vector<Tensor> Call(Layer& l, const Tensor& x, bool training, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Shape> in{Shape(x.shape().begin() + 1, x.shape().end())};
  EXPECT_TRUE(l.Build(in, BuildContext{&rng}).ok());
  std::vector<Tensor> out(1);
  Saved s;
  l.Forward(Args{{&x}, {nullptr}}, &out, &s, CallContext{training, &rng});
  return out;
}

TEST(AugmentTest, FlipsAreExactAndOffInInference) {
  Tensor x({1, 2, 3, 1}, {1, 2, 3, 4, 5, 6});
  auto h = MakeRandomFlip("f", true, false);
  bool saw_flip = false, saw_same = false;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    Tensor y = Call(*h, x, true, seed)[0];
    if (y == Tensor({1, 2, 3, 1}, {3, 2, 1, 6, 5, 4})) saw_flip = true;
    if (y == x) saw_same = true;
  }
  EXPECT_TRUE(saw_flip && saw_same);
  EXPECT_EQ(Call(*h, x, false, 1)[0], x);
  EXPECT_EQ(CheckLayerGradients(*MakeRandomFlip("f", true, true), {RandomTensor({3, 4, 5, 2}, 1)}),
            "");
}

TEST(AugmentTest, AQuarterTurnMovesPixelsExactly) {
  RotationOptions o;
  o.lower = o.upper = 0.25f;  // always a quarter turn
  o.fill = FillMode::kConstant;
  auto r = MakeRandomRotation("r", o);
  Tensor x({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor y = Call(*r, x, true, 1)[0];
  // Output (x, y) reads input (-y + 2, x): a rotation of the grid by 90 degrees.
  const Tensor want({1, 3, 3, 1}, {3, 6, 9, 2, 5, 8, 1, 4, 7});
  for (int64_t i = 0; i < 9; ++i) EXPECT_NEAR(y[i], want[i], 1e-5f) << i;
  EXPECT_EQ(Call(*r, x, false, 1)[0], x);
}

TEST(AugmentTest, RotationGradientsFlowThroughTheSampling) {
  for (FillMode m :
       {FillMode::kReflect, FillMode::kConstant, FillMode::kWrap, FillMode::kNearest}) {
    RotationOptions o;
    o.lower = -0.1f;
    o.upper = 0.1f;
    o.fill = m;
    auto r = MakeRandomRotation("r", o);
    EXPECT_EQ(CheckLayerGradients(*r, {RandomTensor({2, 5, 6, 2}, 3)}), "") << static_cast<int>(m);
  }
}

}  // namespace
}  // namespace lockstep::trainer::graph
