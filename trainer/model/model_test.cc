// Models: gradient checks through whole networks (every layer type, including Dropout and
// Flatten), determinism, and the optimizers' update rules.
#include "trainer/model/model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/data/dataset.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer {
namespace {

Dataset Slice(const Dataset& d, int64_t n) { return Rows(d, 0, n); }

// dL/dp from TrainStep against central differences of Evaluate's loss, at a few coordinates of
// every parameter tensor.
void CheckModelGradients(const std::string& name) {
  auto model = *BuildBuiltinModel(name, 3);
  Dataset d = SyntheticDataset(3, 4);
  Dataset x = Slice(d, 3);
  model->TrainStep(x);
  std::vector<Tensor*> params = model->Params();
  std::vector<Tensor> grads;
  for (Tensor* g : model->Grads()) grads.push_back(*g);
  for (size_t t = 0; t < params.size(); ++t) {
    Tensor* p = params[t];
    for (int64_t i = 0; i < p->size(); i += std::max<int64_t>(1, p->size() / 5)) {
      const float saved = (*p)[i];
      const float eps = 1e-3f;  // small enough not to cross a ReLU or max-pool kink
      (*p)[i] = saved + eps;
      double up = model->Evaluate(x).loss;
      (*p)[i] = saved - eps;
      double down = model->Evaluate(x).loss;
      (*p)[i] = saved;
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grads[t][i], numeric, 2e-2 * std::max(1.0, std::abs(numeric)))
          << name << " param " << t << " index " << i;
    }
  }
}

TEST(ModelTest, MlpGradientsMatchFiniteDifferences) { CheckModelGradients("mlp"); }
TEST(ModelTest, CnnGradientsMatchFiniteDifferences) { CheckModelGradients("cnn"); }

TEST(ModelTest, ShapesAndParameterCounts) {
  auto mlp = *BuildBuiltinModel("mlp", 1);
  EXPECT_EQ(mlp->NumParams(), 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
  auto cnn = *BuildBuiltinModel("cnn", 1);
  EXPECT_EQ(cnn->NumParams(), 32 * 9 + 32 + 64 * 32 * 9 + 64 + 1600 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(BuildBuiltinModel("resnet", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, SameSeedSameTraining) {
  Dataset d = SyntheticDataset(64, 9);
  std::vector<std::vector<float>> finals;
  for (int run = 0; run < 2; ++run) {
    auto model = *BuildBuiltinModel("mlp", 42);
    auto opt = MakeAdam(1e-3f);
    for (int step = 0; step < 3; ++step) {
      model->TrainStep(d);
      opt->Step(model->Params(), model->Grads());
    }
    finals.push_back(model->Params()[0]->values());
  }
  EXPECT_EQ(finals[0], finals[1]);
  auto other = *BuildBuiltinModel("mlp", 43);
  EXPECT_NE(other->Params()[0]->values(), (*BuildBuiltinModel("mlp", 42))->Params()[0]->values());
}

TEST(ModelTest, DropoutScalesInTrainingAndIsIdentityOtherwise) {
  auto drop = MakeDropout(0.5f, 1);
  Tensor x({1000}, 1.0f);
  const Tensor& y = drop->Forward(x, true);
  int kept = 0;
  for (int64_t i = 0; i < y.size(); ++i) {
    ASSERT_TRUE(y[i] == 0.0f || y[i] == 2.0f);
    kept += y[i] != 0.0f;
  }
  EXPECT_GT(kept, 400);
  EXPECT_LT(kept, 600);
  const Tensor& dx = drop->Backward(Tensor({1000}, 1.0f));
  for (int64_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], y[i]);
  EXPECT_EQ(drop->Forward(x, false), x);
}

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
