// GraphModel: a Keras model file as the model a replica trains on class-labelled examples.
#include "trainer/model/graph_model.h"

#include <gtest/gtest.h>

#include "trainer/data/dataset.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer {
namespace {

using nlohmann::json;

std::string Example(const std::string& name) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/" + name;
}

Tensor Slice(const Dataset& d, int64_t at, int64_t n) {
  Shape s = d.images.shape();
  s[0] = n;
  Tensor t(s);
  std::copy_n(d.images.data() + at * d.example_size(), n * d.example_size(), t.data());
  return t;
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
  const std::vector<int32_t> test_labels(test.labels.begin(), test.labels.end());
  const double before = (*m)->Evaluate(test.images, test_labels).loss;
  for (int step = 0; step < 40; ++step) {
    const int64_t at = (step * 32) % 512;
    std::vector<int32_t> y(train.labels.begin() + at, train.labels.begin() + at + 32);
    (*m)->TrainStep(Slice(train, at, 32), y);
    (*opt)->Step((*m)->Params(), (*m)->Grads());
  }
  cpu::XentResult after = (*m)->Evaluate(test.images, test_labels);
  EXPECT_LT(after.loss, before / 4);
  EXPECT_GT(after.correct, 230);
}

TEST(GraphModelTest, ModelsTheTrainersDataCannotFeedAreRefusedWithTheReason) {
  auto load = [](json doc) {
    auto k = keras::LoadKerasModel(doc);
    EXPECT_TRUE(k.ok()) << k.status();
    return GraphModel::FromKeras(std::move(*k), 1).status();
  };
  json d = {{"class_name", "Dense"}, {"config", {{"name", "d"}, {"units", 3}}}};
  json open = d;
  open["config"]["batch_input_shape"] = {nullptr, nullptr, 4};
  EXPECT_NE(load({{"class_name", "Sequential"}, {"config", json::array({open})}})
                .message()
                .find("leaves an input axis open"),
            std::string::npos);
  json regression = d;
  regression["config"]["batch_input_shape"] = {nullptr, 4};
  json m = {{"module", "keras"},
            {"class_name", "Sequential"},
            {"config", {{"name", "r"}, {"layers", {regression}}}},
            {"compile_config", {{"loss", "mse"}}}};
  EXPECT_NE(load(m).message().find("its loss mean_squared_error"), std::string::npos) << load(m);
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
  EXPECT_EQ((*m)->loss().kind, graph::LossKind::kBinaryCrossentropy);
  EXPECT_EQ((*m)->classes(), 2);
  Tensor x({2, 3}, {1, 2, 3, -1, -2, -3});
  cpu::XentResult r = (*m)->TrainStep(x, {1, 0});
  EXPECT_GT(r.loss, 0);
  EXPECT_EQ((*m)->TakeInputError(), "");
}

}  // namespace
}  // namespace lockstep::trainer
