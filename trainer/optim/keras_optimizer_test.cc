// Keras optimizers: parsing every spelling, each update rule against its formula, clipping,
// weight decay, and the learning-rate schedules.
#include "trainer/optim/keras_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lockstep::trainer {
namespace {

using nlohmann::json;

// One tensor of two values stepped once with gradient g.
std::vector<float> StepOnce(const json& spec, std::vector<float> p, std::vector<float> g,
                            int steps = 1) {
  auto o = ParseKerasOptimizer(spec);
  EXPECT_TRUE(o.ok()) << o.status();
  auto opt = MakeKerasOptimizer(*o);
  Tensor pt({static_cast<int64_t>(p.size())}, p), gt({static_cast<int64_t>(g.size())}, g);
  for (int i = 0; i < steps; ++i) opt->Step({&pt}, {&gt});
  return pt.values();
}

TEST(KerasOptimizerTest, ParsesEverySpellingAndRefusesByName) {
  EXPECT_EQ(ParseKerasOptimizer("adam")->kind, "adam");
  EXPECT_EQ(ParseKerasOptimizer(
                json{{"class_name", "Custom>Adam"}, {"config", {{"learning_rate", 0.01}}}})
                ->learning_rate,
            0.01f);
  EXPECT_EQ(ParseKerasOptimizer(json{{"module", "keras.optimizers"},
                                     {"class_name", "SGD"},
                                     {"config",
                                      {{"name", "SGD"},
                                       {"learning_rate", 0.1},
                                       {"momentum", 0.9},
                                       {"nesterov", true},
                                       {"use_ema", false},
                                       {"clipnorm", nullptr}}},
                                     {"registered_name", nullptr}})
                ->nesterov,
            true);
  EXPECT_EQ(ParseKerasOptimizer("nadam").status().message(),
            "optimizer nadam is not supported (supported: SGD, Adam, AdamW, RMSprop, Adagrad)");
  EXPECT_EQ(ParseKerasOptimizer(json{{"class_name", "Adam"}, {"config", {{"use_ema", true}}}})
                .status()
                .message(),
            "optimizer Adam: option use_ema=true is not supported");
  EXPECT_EQ(
      ParseKerasOptimizer(json{{"class_name", "AdamW"}, {"config", json::object()}})->weight_decay,
      0.004f);
}

TEST(KerasOptimizerTest, SgdMomentumAndNesterovFollowKeras) {
  const json sgd = {{"class_name", "SGD"}, {"config", {{"learning_rate", 0.1}, {"momentum", 0.5}}}};
  // m1 = -0.1 g; p1 = p + m1. m2 = 0.5 m1 - 0.1 g; p2 = p1 + m2.
  std::vector<float> p = StepOnce(sgd, {1, 2}, {1, -2}, 2);
  EXPECT_NEAR(p[0], 1 - 0.1f - 0.15f, 1e-6f);
  EXPECT_NEAR(p[1], 2 + 0.2f + 0.3f, 1e-6f);
  json nag = sgd;
  nag["config"]["nesterov"] = true;
  p = StepOnce(nag, {1}, {1});
  EXPECT_NEAR(p[0], 1 + 0.5f * -0.1f - 0.1f, 1e-6f);
}

TEST(KerasOptimizerTest, AdamPutsEpsilonOutsideTheBiasCorrection) {
  const json adam = {{"class_name", "Adam"},
                     {"config", {{"learning_rate", 0.01}, {"epsilon", 0.1}}}};
  // Step 1: m = 0.1 g, v = 0.001 g^2, alpha = lr sqrt(0.001) / 0.1.
  const float g = 2;
  const float m = 0.1f * g, v = 0.001f * g * g;
  const float alpha = 0.01f * std::sqrt(0.001f) / 0.1f;
  EXPECT_NEAR(StepOnce(adam, {1}, {g})[0], 1 - alpha * m / (std::sqrt(v) + 0.1f), 1e-6f);
  json w = adam;
  w["class_name"] = "AdamW";
  w["config"]["weight_decay"] = 0.5;
  EXPECT_NEAR(StepOnce(w, {1}, {g})[0], 1 * (1 - 0.01f * 0.5f) - alpha * m / (std::sqrt(v) + 0.1f),
              1e-6f);
}

TEST(KerasOptimizerTest, RmspropAndAdagradFollowKeras) {
  const json rms = {{"class_name", "RMSprop"},
                    {"config", {{"learning_rate", 0.01}, {"rho", 0.9}, {"epsilon", 1e-7}}}};
  const float v = 0.1f * 9;
  EXPECT_NEAR(StepOnce(rms, {1}, {3})[0], 1 - 0.01f * 3 / std::sqrt(v + 1e-7f), 1e-6f);
  json centered = rms;
  centered["config"]["centered"] = true;
  centered["config"]["momentum"] = 0.5;
  const float a = 0.1f * 3;
  EXPECT_NEAR(StepOnce(centered, {1}, {3})[0], 1 - 0.01f * 3 / std::sqrt(v - a * a + 1e-7f), 1e-6f);
  const json ada = {{"class_name", "Adagrad"}, {"config", {{"learning_rate", 0.1}}}};
  EXPECT_NEAR(StepOnce(ada, {1}, {2})[0], 1 - 0.1f * 2 / std::sqrt(0.1f + 4 + 1e-7f), 1e-6f);
}

TEST(KerasOptimizerTest, ClippingByValueNormAndGlobalNorm) {
  const json base = {{"class_name", "SGD"}, {"config", {{"learning_rate", 1.0}}}};
  json v = base;
  v["config"]["clipvalue"] = 0.5;
  EXPECT_EQ(StepOnce(v, {0, 0}, {2, -0.25f}), (std::vector<float>{-0.5f, 0.25f}));
  json n = base;
  n["config"]["clipnorm"] = 1.0;
  std::vector<float> p = StepOnce(n, {0, 0}, {3, 4});  // norm 5 -> scaled to 1
  EXPECT_NEAR(p[0], -0.6f, 1e-6f);
  EXPECT_NEAR(p[1], -0.8f, 1e-6f);
  json gl = base;
  gl["config"]["global_clipnorm"] = 1.0;
  auto o = ParseKerasOptimizer(gl);
  auto opt = MakeKerasOptimizer(*o);
  Tensor a({1}, 3.0f), b({1}, 4.0f), ga({1}, 3.0f), gb({1}, 4.0f);
  opt->Step({&a, &b}, {&ga, &gb});  // global norm 5 over both tensors
  EXPECT_NEAR(a[0], 3 - 0.6f, 1e-6f);
  EXPECT_NEAR(b[0], 4 - 0.8f, 1e-6f);
}

TEST(KerasOptimizerTest, SchedulesFollowKeras) {
  const json exp = {{"class_name", "ExponentialDecay"},
                    {"config",
                     {{"initial_learning_rate", 0.1},
                      {"decay_steps", 10},
                      {"decay_rate", 0.5},
                      {"staircase", false}}}};
  EXPECT_TRUE(CheckKerasSchedule(exp).ok());
  EXPECT_NEAR(KerasScheduleAt(exp, 20), 0.025f, 1e-7f);
  EXPECT_NEAR(KerasScheduleAt(exp, 5), 0.1f * std::sqrt(0.5f), 1e-7f);
  json stair = exp;
  stair["config"]["staircase"] = true;
  EXPECT_NEAR(KerasScheduleAt(stair, 15), 0.05f, 1e-7f);
  const json cos = {
      {"class_name", "CosineDecay"},
      {"config", {{"initial_learning_rate", 0.2}, {"decay_steps", 100}, {"alpha", 0.1}}}};
  EXPECT_NEAR(KerasScheduleAt(cos, 0), 0.2f, 1e-7f);
  EXPECT_NEAR(KerasScheduleAt(cos, 50), 0.2f * (0.9f * 0.5f + 0.1f), 1e-6f);
  EXPECT_NEAR(KerasScheduleAt(cos, 500), 0.02f, 1e-7f);
  const json pw = {{"class_name", "PiecewiseConstantDecay"},
                   {"config", {{"boundaries", {10, 20}}, {"values", {1.0, 0.5, 0.1}}}}};
  EXPECT_EQ(KerasScheduleAt(pw, 10), 1.0f);
  EXPECT_EQ(KerasScheduleAt(pw, 11), 0.5f);
  EXPECT_EQ(KerasScheduleAt(pw, 21), 0.1f);
  EXPECT_FALSE(CheckKerasSchedule(json{{"class_name", "InverseTimeDecay"}}).ok());
  auto sgd = ParseKerasOptimizer(json{{"class_name", "SGD"}, {"config", {{"learning_rate", exp}}}});
  ASSERT_TRUE(sgd.ok());
  EXPECT_EQ(sgd->schedule, exp);
  auto rate = LearningRate::Make(
      "cosine", 1, json{{"class_name", "SGD"}, {"config", {{"learning_rate", exp}}}}.dump());
  ASSERT_TRUE(rate.ok());
  EXPECT_NEAR(rate->At(20, 100), 0.025f, 1e-7f);
}

}  // namespace
}  // namespace lockstep::trainer
