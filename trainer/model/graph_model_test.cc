// GraphModel: a Keras model file as the model a replica trains on class-labelled examples.
#include "trainer/model/graph_model.h"

#include <gtest/gtest.h>

#include "common/json_text.h"
#include "trainer/data/dataset.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/keras/model_loader.h"
#include "trainer/model/builtin_models.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer {
namespace {

using nlohmann::json;

std::string Example(const std::string& name) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/" + name;
}

TEST(GraphModelTest, TheExampleMlpLearnsASyntheticTask) {
  auto m = GraphModel::Load(Example("mlp.json"), 1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->example_shape(), Shape({28, 28, 1}));
  EXPECT_EQ((*m)->classes(), 10);
  EXPECT_TRUE((*m)->loss().from_logits);  // the output is a linear Dense
  EXPECT_EQ((*m)->NumParams(), 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
  Dataset train = SyntheticDataset(512, 3, 0, {28, 28, 1}, 10);
  Dataset test = SyntheticDataset(256, 3, 1, {28, 28, 1}, 10);
  auto opt = MakeOptimizer("adam", 0.001f, 0.9f);
  const double before = (*m)->Evaluate(test).loss;
  for (int step = 0; step < 40; ++step) {
    const int64_t at = (step * 32) % 512;
    (*m)->TrainStep(Rows(train, at, 32));
    (*opt)->Step((*m)->Params(), (*m)->Grads());
  }
  StepResult after = (*m)->Evaluate(test);
  EXPECT_LT(after.loss, before / 4);
  EXPECT_GT(after.correct, 230);
}

// --model=mlp, cnn and mlp-large are the example files, embedded: the same documents, the same
// networks, and the same weights from one seed.
TEST(GraphModelTest, TheBuiltinModelsAreTheExampleFiles) {
  for (const std::string name : {"mlp", "cnn", "mlp-large"}) {
    ASSERT_TRUE(IsBuiltinModel(name));
    absl::StatusOr<json> embedded = ReadModelDocument(name);
    ASSERT_TRUE(embedded.ok()) << embedded.status();
    absl::StatusOr<json> file = keras::ReadJsonFile(Example(name + ".json"));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(*embedded, *file) << name;
  }
  EXPECT_EQ(BuiltinModelNames(), "mlp, cnn, mlp-large");
  for (const std::string name : {"mlp", "cnn"}) {
    auto builtin = GraphModel::Load(name, 5);
    auto file = GraphModel::Load(Example(name + ".json"), 5);
    ASSERT_TRUE(builtin.ok() && file.ok()) << name;
    std::vector<Tensor*> a = (*builtin)->Params(), b = (*file)->Params();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(*a[i], *b[i]) << name << " weight " << i;
    auto other_seed = GraphModel::Load(name, 6);
    ASSERT_TRUE(other_seed.ok());
    EXPECT_NE(*(*other_seed)->Params()[0], *a[0]) << name;
  }
  auto cnn = BuildModel("cnn", 1);
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  EXPECT_EQ((*cnn)->NumParams(), 32 * 9 + 32 + 64 * 32 * 9 + 64 + 1600 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ((*cnn)->example_shape(), Shape({28, 28, 1}));
  EXPECT_TRUE((*cnn)->outputs()[0].loss.from_logits);
  absl::Status unknown = BuildModel("resnet", 1).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("unknown model \"resnet\" (known: mlp, cnn, mlp-large"),
            std::string::npos)
      << unknown;
}

// The built-in cnn's backward pass (every layer kind it has: Conv2D, MaxPooling2D, Flatten,
// Dense, ReLU) against finite differences.
TEST(GraphModelTest, TheBuiltinCnnsGradientsMatchFiniteDifferences) {
  auto cnn = GraphModel::Load("cnn", 3);
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  const Tensor x = graph::testing::RandomTensor({2, 28, 28, 1}, 4);
  EXPECT_EQ(
      graph::testing::CheckGraphGradients((*cnn)->graph(), {x}, {.samples = 4, .max_tensors = 4}),
      "");
}

TEST(GraphModelTest, EachOutputsLossIsTheFilesOrInferredFromItsActivation) {
  auto load = [](json doc, const std::string& flag = "") {
    auto k = keras::LoadKerasModel(doc);
    EXPECT_TRUE(k.ok()) << k.status();
    return GraphModel::FromKeras(std::move(*k), 1, flag);
  };
  auto dense = [](int units, const std::string& activation) {
    return json{{"class_name", "Dense"},
                {"config",
                 {{"name", "d"},
                  {"units", units},
                  {"activation", activation},
                  {"batch_input_shape", {nullptr, 4}}}}};
  };
  auto sequential = [](json layer, json compile = nullptr) {
    json m = {{"class_name", "Sequential"}, {"config", {{"name", "s"}, {"layers", {layer}}}}};
    if (!compile.is_null()) m["training_config"] = compile;
    return m;
  };
  struct Case {
    json model;
    std::string flag;
    LossKind kind;
    bool from_logits;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {sequential(dense(1, "linear")), "", LossKind::kMeanSquaredError, false, "regression"},
      {sequential(dense(3, "linear")), "", LossKind::kSparseCategoricalCrossentropy, true,
       "logits"},
      {sequential(dense(3, "softmax")), "", LossKind::kSparseCategoricalCrossentropy, false,
       "softmax"},
      {sequential(dense(3, "sigmoid")), "", LossKind::kBinaryCrossentropy, false, "sigmoid"},
      {sequential(dense(3, "relu")), "", LossKind::kMeanSquaredError, false, "relu"},
      {sequential(dense(1, "linear"), {{"loss", "mae"}}), "", LossKind::kMeanAbsoluteError, false,
       "compile config"},
      {sequential(dense(3, "softmax"), {{"loss", "mse"}}), "huber", LossKind::kHuber, false,
       "--loss"},
      // Keras 3 serialises a loss given as a function so.
      {sequential(dense(3, "softmax"), {{"loss",
                                         {{"module", "builtins"},
                                          {"class_name", "function"},
                                          {"config", "categorical_crossentropy"}}}}),
       "", LossKind::kCategoricalCrossentropy, false, "compile config"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model.dump() + " --loss=" + c.flag);
    auto m = load(c.model, c.flag);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->loss().kind, c.kind);
    EXPECT_EQ((*m)->loss().from_logits, c.from_logits);
    EXPECT_NE((*m)->loss_reasons()[0].find(c.reason), std::string::npos) << (*m)->loss_reasons()[0];
  }
  // A per-step classifier: TimeDistributed(Dense(softmax)) takes a class id per step.
  json lstm = {{"class_name", "LSTM"},
               {"config",
                {{"name", "lstm"},
                 {"units", 4},
                 {"return_sequences", true},
                 {"batch_input_shape", {nullptr, 6, 3}}}}};
  json per_step = {{"class_name", "TimeDistributed"},
                   {"config",
                    {{"name", "tags"},
                     {"layer",
                      {{"class_name", "Dense"},
                       {"config", {{"name", "tag"}, {"units", 5}, {"activation", "softmax"}}}}}}}};
  auto tagger = load(
      {{"class_name", "Sequential"}, {"config", {{"name", "t"}, {"layers", {lstm, per_step}}}}});
  ASSERT_TRUE(tagger.ok()) << tagger.status();
  EXPECT_EQ((*tagger)->loss().kind, LossKind::kSparseCategoricalCrossentropy);
  EXPECT_FALSE((*tagger)->loss().from_logits);
  EXPECT_EQ(TargetShape((*tagger)->outputs()[0]), Shape({6}));
  json open = dense(3, "softmax");
  open["config"]["batch_input_shape"] = {nullptr, nullptr, 4};
  EXPECT_NE(load(sequential(open)).status().message().find("--open-axis-size"), std::string::npos);
  EXPECT_NE(load(sequential(dense(3, "softmax")), "hinge").status().message().find("--loss"),
            std::string::npos);
  EXPECT_EQ(BuildModel("/nonexistent.json", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(BuildModel("resnet", 1).status().message().find("unknown model"), std::string::npos);
}

TEST(GraphModelTest, ASigmoidUnitTakesBinaryLabels) {
  json d = {{"class_name", "Dense"},
            {"config",
             {{"name", "p"},
              {"units", 1},
              {"activation", "sigmoid"},
              {"batch_input_shape", {nullptr, 3}}}}};
  auto k = keras::LoadKerasModel({{"class_name", "Sequential"}, {"config", json::array({d})}});
  ASSERT_TRUE(k.ok());
  auto m = GraphModel::FromKeras(std::move(*k), 1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->loss().kind, LossKind::kBinaryCrossentropy);
  EXPECT_EQ((*m)->classes(), 2);
  const Dataset batch{.inputs = {Tensor({2, 3}, {1, 2, 3, -1, -2, -3})},
                      .targets = {Tensor({2, 1}, {1, 0})}};
  StepResult r = (*m)->TrainStep(batch);
  EXPECT_GT(r.loss, 0);
  EXPECT_EQ((*m)->TakeInputError(), "");
}

}  // namespace
}  // namespace lockstep::trainer
