// PReLU: its formula and alpha's shape, its gradients by finite differences, its Keras config
// (what is refused, by name), its GPU verdicts, and its ONNX form evaluated by an independent
// evaluator (PyTorch's functions) against the engine.
#include "trainer/layers/prelu/prelu.h"

#include <gtest/gtest.h>

#include "trainer/graph/testing/gradcheck.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/keras/model_loader.h"
#include "trainer/layers/registry.h"
#include "trainer/testing/onnx_check.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer::graph {
namespace {

using nlohmann::json;
using testing::CheckLayerGradients;
using testing::RandomTensor;

std::unique_ptr<Layer> Built(PReluOptions o, const Shape& example) {
  auto l = MakePRelu("p", std::move(o));
  std::mt19937_64 rng(1);
  EXPECT_TRUE(l->Build({example}, BuildContext{&rng}).ok());
  return l;
}

TEST(PReluTest, AlphaScalesTheNegativesPerElementAndAlongSharedAxes) {
  auto l = Built({.shared_axes = {1}}, {2, 3});
  ASSERT_EQ(l->weights()[0].value.shape(), Shape({1, 3}));
  EXPECT_EQ(l->weights()[0].value, Tensor({1, 3}, 0.0f));  // Keras's default: zeros
  l->weights()[0].value = Tensor({1, 3}, {0.1f, 0.2f, 0.3f});
  const Tensor x({1, 2, 3}, {-1, 2, -3, 4, -5, 0});
  std::vector<Tensor> out(1);
  Saved s;
  l->Forward(Args{{&x}, {nullptr}}, &out, &s, CallContext{});
  const std::vector<float> want{-0.1f, 2, -0.3f * 3, 4, -0.2f * 5, 0};
  ASSERT_EQ(out[0].shape(), x.shape());
  for (int64_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(out[0][i], want[static_cast<size_t>(i)]);
}

TEST(PReluTest, GradientsMatchFiniteDifferences) {
  for (const std::vector<int64_t>& shared :
       {std::vector<int64_t>{}, std::vector<int64_t>{1, 2}, std::vector<int64_t>{2}}) {
    Initializer uniform{.kind = Initializer::Kind::kRandomUniform, .minval = -0.5f, .maxval = 0.5f};
    PReluOptions o{.alpha_initializer = uniform, .shared_axes = shared};
    auto l = MakePRelu("p", o);
    EXPECT_EQ(CheckLayerGradients(*l, {RandomTensor({3, 4, 5, 2}, 7)}), "") << shared.size();
  }
}

absl::StatusOr<std::unique_ptr<Layer>> FromKeras(json config) {
  return keras::LayerFactories::Get().Build({{"class_name", "PReLU"}, {"config", config}}, false);
}

TEST(PReluTest, KerasConfigsBuildAndWhatIsNotSupportedIsNamed) {
  auto l =
      FromKeras({{"name", "act"},
                 {"alpha_initializer", {{"class_name", "Constant"}, {"config", {{"value", 0.25}}}}},
                 {"alpha_regularizer", {{"class_name", "L2"}, {"config", {{"l2", 0.01}}}}},
                 {"alpha_constraint", nullptr},
                 {"shared_axes", {1, 2}}});
  ASSERT_TRUE(l.ok()) << l.status();
  std::mt19937_64 rng(1);
  ASSERT_TRUE((*l)->Build({{4, 4, 8}}, BuildContext{&rng}).ok());
  EXPECT_EQ((*l)->weights()[0].value, Tensor({1, 1, 8}, 0.25f));
  EXPECT_FLOAT_EQ((*l)->weights()[0].l2, 0.01f);
  EXPECT_EQ((*l)->class_name(), "PReLU");

  auto constrained = FromKeras({{"name", "c"}, {"alpha_constraint", {{"class_name", "NonNeg"}}}});
  ASSERT_FALSE(constrained.ok());
  EXPECT_NE(constrained.status().message().find("alpha_constraint"), std::string::npos)
      << constrained.status();
  auto bad_axis = FromKeras({{"name", "b"}, {"shared_axes", {3}}});
  ASSERT_TRUE(bad_axis.ok());
  absl::Status s = (*bad_axis)->Build({{4, 8}}, BuildContext{&rng}).status();
  EXPECT_NE(s.message().find("shared axis 3 is not an axis of its input [4, 8]"), std::string::npos)
      << s;
}

TEST(PReluTest, RunsOnTheGpuWhenItsSharedAxesLead) {
  const layers::Registry& r = layers::Registry::Get();
  EXPECT_TRUE(r.GpuSupported(*Built({.shared_axes = {1, 2}}, {4, 4, 8}), {}).ok());
  EXPECT_TRUE(r.GpuSupported(*Built({}, {4, 8}), {}).ok());
  absl::Status s = r.GpuSupported(*Built({.shared_axes = {2}}, {4, 4, 8}), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layer 'p' (PReLU) has no GPU implementation yet: shared_axes"),
            std::string::npos)
      << s;
}

TEST(PReluTest, ItsOnnxFormMatchesTheEngine) {
  json conv = {{"class_name", "Conv2D"},
               {"config", {{"name", "c"}, {"filters", 3}, {"kernel_size", {3, 3}}}}};
  json prelu = {
      {"class_name", "PReLU"},
      {"config",
       {{"name", "p"},
        {"alpha_initializer", {{"class_name", "RandomUniform"}, {"config", {{"seed", 2}}}}},
        {"shared_axes", {1, 2}}}}};
  json dense_in = {{"class_name", "InputLayer"},
                   {"config", {{"name", "in"}, {"batch_input_shape", {nullptr, 6, 6, 2}}}}};
  auto m = keras::LoadKerasModel(
      {{"class_name", "Sequential"},
       {"config",
        {{"name", "s"},
         {"layers",
          {dense_in, conv, prelu, {{"class_name", "PReLU"}, {"config", {{"name", "q"}}}}}}}}},
      {.seed = 3});
  ASSERT_TRUE(m.ok()) << m.status();
  lockstep::trainer::testing::TempDir dir("prelu_test");
  const std::string result =
      lockstep::trainer::testing::CheckOnnxExport(*m->graph, dir.Path("model.onnx"), 5);
  if (result.rfind("skip: ", 0) == 0) GTEST_SKIP() << result;
  EXPECT_EQ(result, "");
}

}  // namespace
}  // namespace lockstep::trainer::graph
