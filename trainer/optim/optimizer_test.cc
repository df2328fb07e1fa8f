// The trainer's own optimizers (SGD with momentum, Adam): their update rules and their flags'
// errors. Keras's optimizers are tested in keras_optimizer_test.cc.
#include "trainer/optim/optimizer.h"

#include <gtest/gtest.h>

namespace lockstep::trainer {
namespace {

TEST(OptimizerTest, SgdMomentumFollowsItsRule) {
  Tensor p({2}, {1.0f, -1.0f}), g({2}, {0.5f, 0.25f});
  auto sgd = MakeSgd(0.1f, 0.9f);
  sgd->Step({&p}, {&g});  // v = g; p -= 0.1 g
  EXPECT_FLOAT_EQ(p[0], 0.95f);
  sgd->Step({&p}, {&g});  // v = 0.9 g + g
  EXPECT_FLOAT_EQ(p[0], 0.95f - 0.1f * 1.9f * 0.5f);
  EXPECT_EQ(sgd->State().size(), 1u);
}

TEST(OptimizerTest, AdamFirstStepIsLearningRateTimesSign) {
  Tensor p({2}, {1.0f, 1.0f}), g({2}, {3.0f, -0.001f});
  auto adam = MakeAdam(0.01f);
  adam->Step({&p}, {&g});
  EXPECT_NEAR(p[0], 0.99f, 1e-5);
  EXPECT_NEAR(p[1], 1.01f, 1e-4);
  EXPECT_EQ(adam->State().size(), 3u);  // step, m, v
  EXPECT_EQ((*adam->State()[0])[0], 1.0f);
}

TEST(OptimizerTest, BadSettingsNameTheFlag) {
  EXPECT_EQ(MakeOptimizer("rmsprop", 0.1f, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(MakeOptimizer("sgd", -1.0f, 0).status().message().find("--learning-rate"),
            std::string::npos);
  EXPECT_NE(MakeOptimizer("sgd", 0.1f, 1.5f).status().message().find("--momentum"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep::trainer
