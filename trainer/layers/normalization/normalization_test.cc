// BatchNormalization, LayerNormalization and Normalization against finite differences, their
// defining formulas and their Keras configs (PyTorch checks them in conv_test.cc's oracle
// cases).
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/preprocessing/preprocessing.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/graph/testing/forward.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/kernels/cpu/threads.h"

namespace lockstep::trainer::graph {
namespace {

using nlohmann::json;
using testing::CheckLayerGradients;
using testing::Forward1;
using testing::ForwardBackward;
using testing::FromJson;
using testing::PerExample;
using testing::RandomTensor;

const Weight* FindWeight(const Layer& l, const std::string& name) {
  for (const Weight& w : l.weights()) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

void ExpectNear(const Tensor& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), static_cast<int64_t>(b.size()));
  for (int64_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[static_cast<size_t>(i)], tol) << i;
  }
}

// BatchNormalization's passes split their rows over the kernels' threads; its sums gather
// per-block partial sums in block order, so values, gradients and the moving statistics are
// the same to the bit at any count, with a mask too, in training and inference.
TEST(NormalizationLayersTest, BatchNormSplitOverThreadsEqualsOneThread) {
  const Tensor x = RandomTensor({32, 17, 17, 24}, 3);  // 9,248 rows: not whole blocks
  const Tensor dy = RandomTensor(x.shape(), 4);
  const Tensor seq = RandomTensor({8, 500, 40}, 5);
  const Tensor seq_dy = RandomTensor(seq.shape(), 6);
  std::vector<float> keep(8 * 500);
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = (i * 7919) % 5 == 0 ? 0.0f : 1.0f;
  const Tensor mask({8, 500}, keep);
  for (bool training : {true, false}) {
    std::vector<std::vector<Tensor>> runs, masked;
    for (int threads : {1, 2, 3}) {
      cpu::SetCpuThreads(threads);
      auto bn = MakeBatchNormalization("bn", {});
      runs.push_back(ForwardBackward(*bn, {x}, {dy}, training));
      auto bm = MakeBatchNormalization("bm", {});
      masked.push_back(ForwardBackward(*bm, {seq}, {seq_dy}, training, {&mask}));
    }
    cpu::SetCpuThreads(1);
    ASSERT_EQ(runs[0].size(), 10u);  // y, dx, then gamma, beta and the moving statistics
    for (size_t r = 1; r < runs.size(); ++r) {
      EXPECT_EQ(runs[r], runs[0]) << "training " << training << ", " << r + 1 << " threads";
      EXPECT_EQ(masked[r], masked[0]) << "training " << training << ", " << r + 1 << " threads";
    }
  }
}

TEST(NormalizationLayersTest, BatchNormTrainsOnBatchStatisticsWithTheBiasedVariance) {
  auto bn = MakeBatchNormalization("bn", {});
  const Tensor x({4, 1}, {1, 2, 3, 4});  // mean 2.5, biased variance 1.25
  const Tensor y = Forward1(*bn, x, true);
  const float r = 1.0f / std::sqrt(1.25f + 1e-3f);
  ExpectNear(y, {-1.5f * r, -0.5f * r, 0.5f * r, 1.5f * r});
  ASSERT_EQ(bn->weights().size(), 4u);
  EXPECT_EQ(bn->weights()[0].name, "gamma");
  EXPECT_EQ(bn->weights()[1].name, "beta");
  EXPECT_TRUE(bn->weights()[1].trainable);
  EXPECT_EQ(bn->weights()[2].name, "moving_mean");
  EXPECT_FALSE(bn->weights()[2].trainable);
  EXPECT_EQ(bn->weights()[3].name, "moving_variance");
  // moving = moving * 0.99 + batch * 0.01, with the biased variance (Keras), not 5/3.
  ExpectNear(bn->weights()[2].value, {0.025f});
  ExpectNear(bn->weights()[3].value, {0.99f + 0.0125f});
  // Inference normalises with the moving statistics and leaves them alone.
  const Tensor yi = Forward1(*bn, x, false);
  const float ri = 1.0f / std::sqrt(1.0025f + 1e-3f);
  ExpectNear(yi, {(1 - 0.025f) * ri, (2 - 0.025f) * ri, (3 - 0.025f) * ri, (4 - 0.025f) * ri});
  ExpectNear(bn->weights()[2].value, {0.025f});
}

TEST(NormalizationLayersTest, FrozenBatchNormRunsInInferenceModeEvenInTraining) {
  BatchNormOptions o;
  o.momentum = 0.5f;
  auto bn = MakeBatchNormalization("bn", o);
  bn->set_trainable(false);
  const Tensor x({2, 2}, {1, 5, 3, 7});
  const Tensor y = Forward1(*bn, x, true);
  const float r = 1.0f / std::sqrt(1.0f + 1e-3f);
  ExpectNear(y, {1 * r, 5 * r, 3 * r, 7 * r});  // moving mean 0, variance 1
  ExpectNear(bn->weights()[2].value, {0, 0});
  ExpectNear(bn->weights()[3].value, {1, 1});
  for (const Weight& w : bn->weights()) EXPECT_FALSE(w.trainable) << w.name;
  EXPECT_EQ(CheckLayerGradients(*bn, {RandomTensor({3, 2}, 1)}), "");
}

TEST(NormalizationLayersTest, BatchNormGradients) {
  testing::GradCheckOptions train;
  train.eps = 1e-3f;
  testing::GradCheckOptions infer = train;
  infer.training = false;
  for (const Shape& shape : {Shape{6, 3}, Shape{2, 3, 4}, Shape{2, 3, 3, 4}}) {
    for (bool center : {true, false}) {
      BatchNormOptions o;
      o.center = center;
      o.scale = !center;
      o.gamma_initializer.kind = Initializer::Kind::kRandomUniform;
      o.gamma_initializer.minval = 0.5f;
      o.gamma_initializer.maxval = 1.5f;
      o.beta_initializer.kind = Initializer::Kind::kRandomUniform;
      EXPECT_EQ(
          CheckLayerGradients(*MakeBatchNormalization("bn", o), {RandomTensor(shape, 1)}, train),
          "")
          << ShapeString(shape);
      EXPECT_EQ(
          CheckLayerGradients(*MakeBatchNormalization("bn", o), {RandomTensor(shape, 2)}, infer),
          "")
          << ShapeString(shape);
    }
    BatchNormOptions both;
    both.gamma_initializer.kind = Initializer::Kind::kRandomUniform;
    EXPECT_EQ(
        CheckLayerGradients(*MakeBatchNormalization("bn", both), {RandomTensor(shape, 3)}, train),
        "");
  }
}

TEST(NormalizationLayersTest, BatchNormMaskedStepsStayOutOfTheStatistics) {
  auto bn = MakeBatchNormalization("bn", {});
  const Tensor x({1, 3, 1}, {1, 100, 3});
  const Tensor mask({1, 3}, {1, 0, 1});
  // Mean (1 + 3) / 2 = 2, variance 1, over the unmasked steps; every step is normalised.
  const Tensor y = Forward1(*bn, x, true, &mask);
  const float r = 1.0f / std::sqrt(1.0f + 1e-3f);
  ExpectNear(y, {-r, 98 * r, r}, 1e-4f);
  ExpectNear(bn->weights()[2].value, {0.02f});
  testing::GradCheckOptions o;
  o.eps = 1e-3f;
  const Tensor m2({2, 4}, {1, 1, 0, 1, 0, 1, 1, 0});
  o.masks = {&m2};
  EXPECT_EQ(CheckLayerGradients(*MakeBatchNormalization("bn", {}), {RandomTensor({2, 4, 3}, 4)}, o),
            "");
  // The mask passes through.
  std::vector<Tensor> out(1);
  Saved s;
  Args args{{&x}, {&mask}};
  std::mt19937_64 rng(1);
  bn->Forward(args, &out, &s, CallContext{true, &rng});
  EXPECT_EQ(bn->OutputMask(args, s), &mask);
}

TEST(NormalizationLayersTest, BatchNormAxisMustBeTheLast) {
  std::mt19937_64 rng(1);
  BatchNormOptions o;
  o.axis = 3;
  EXPECT_TRUE(MakeBatchNormalization("bn", o)->Build({{4, 4, 8}}, BuildContext{&rng}).ok());
  o.axis = 1;
  EXPECT_EQ(
      MakeBatchNormalization("bn", o)->Build({{4, 4, 8}}, BuildContext{&rng}).status().message(),
      "layer 'bn' (BatchNormalization): axis 1 is not the last axis of input [4, 4, 8] "
      "(only channels-last normalization is supported)");
  EXPECT_TRUE(MakeBatchNormalization("bn", o)->Build({{8}}, BuildContext{&rng}).ok());
}

TEST(NormalizationLayersTest, LayerNormFormulaAndGradients) {
  auto ln = MakeLayerNormalization("ln", {});
  const Tensor x({2, 4}, {1, 2, 3, 4, -1, -1, 1, 1});
  const Tensor y = Forward1(*ln, x, true);
  const float r0 = 1.0f / std::sqrt(1.25f + 1e-3f), r1 = 1.0f / std::sqrt(1.0f + 1e-3f);
  ExpectNear(y, {-1.5f * r0, -0.5f * r0, 0.5f * r0, 1.5f * r0, -r1, -r1, r1, r1});
  EXPECT_EQ(ln->weights()[0].name, "gamma");
  EXPECT_EQ(ln->weights()[1].name, "beta");

  testing::GradCheckOptions opts;
  opts.eps = 1e-3f;
  struct Case {
    std::vector<int64_t> axes;
    bool center, scale;
    Shape x, gamma;
  };
  const std::vector<Case> cases = {
      {{-1}, true, true, {3, 5}, {5}},
      {{2}, true, false, {2, 3, 4}, {4}},
      {{-2, -1}, false, true, {2, 3, 4}, {3, 4}},
      {{1, 2, 3}, true, true, {2, 2, 3, 2}, {2, 3, 2}},
  };
  for (const Case& c : cases) {
    LayerNormOptions o;
    o.axes = c.axes;
    o.center = c.center;
    o.scale = c.scale;
    o.gamma_initializer.kind = Initializer::Kind::kRandomUniform;
    o.beta_initializer.kind = Initializer::Kind::kRandomUniform;
    auto l = MakeLayerNormalization("ln", o);
    EXPECT_EQ(CheckLayerGradients(*l, {RandomTensor(c.x, 5, -2, 2)}, opts), "")
        << ShapeString(c.axes);
    EXPECT_EQ(l->weights()[0].value.shape(), c.gamma);
    EXPECT_EQ(l->weights().size(), (c.center ? 1u : 0u) + (c.scale ? 1u : 0u));
  }
  std::mt19937_64 rng(1);
  LayerNormOptions bad;
  bad.axes = {1};
  EXPECT_EQ(
      MakeLayerNormalization("ln", bad)->Build({{3, 4}}, BuildContext{&rng}).status().message(),
      "layer 'ln' (LayerNormalization): axis [1] of input [3, 4] is not supported (the "
      "axes must be the trailing ones, in order)");
  bad.axes = {-1, -2};
  EXPECT_FALSE(MakeLayerNormalization("ln", bad)->Build({{3, 4}}, BuildContext{&rng}).ok());
  bad.axes = {0, 1};
  EXPECT_FALSE(MakeLayerNormalization("ln", bad)->Build({{3}}, BuildContext{&rng}).ok());
}

TEST(NormalizationLayersTest, NormalizationFromConfigAndFromWeights) {
  NormalizationOptions o;
  o.mean = std::vector<float>{1, 2};
  o.variance = std::vector<float>{4, 0};
  auto n = MakeNormalization("n", o);
  // (x - mean) / max(sqrt(var), 1e-7).
  ExpectNear(Forward1(*n, Tensor({1, 2}, {3, 2.000001f}), false), {1, 10}, 0.5f);
  EXPECT_TRUE(n->weights().empty());
  o.variance = std::vector<float>{4, 0.25f};
  EXPECT_EQ(CheckLayerGradients(*MakeNormalization("n", o), {RandomTensor({3, 2}, 1)}), "");
  o.invert = true;
  o.variance = std::vector<float>{4, 9};
  ExpectNear(Forward1(*MakeNormalization("n", o), Tensor({1, 2}, {1, 1}), false), {3, 5});
  EXPECT_EQ(CheckLayerGradients(*MakeNormalization("n", o), {RandomTensor({3, 2}, 1)}), "");
  // Scalars broadcast; axis None normalises everything with them.
  NormalizationOptions none;
  none.axis.reset();
  none.mean = std::vector<float>{3};
  none.variance = std::vector<float>{2};
  ExpectNear(Forward1(*MakeNormalization("n", none), Tensor({3, 1}, {1, 2, 3}), false),
             {-1.4142135f, -0.70710677f, 0});
  // Without statistics in the config: Keras's non-trainable weights, loaded later.
  NormalizationOptions adapted;
  auto a = MakeNormalization("n", adapted);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(a->Build({{5, 3}}, BuildContext{&rng}).ok());
  ASSERT_EQ(a->weights().size(), 3u);
  EXPECT_EQ(a->weights()[0].name, "mean");
  EXPECT_EQ(a->weights()[0].value.shape(), Shape({3}));
  EXPECT_EQ(a->weights()[1].name, "variance");
  EXPECT_EQ(a->weights()[2].name, "count");
  EXPECT_EQ(a->weights()[2].value.shape(), Shape{});
  for (const Weight& w : a->weights()) EXPECT_FALSE(w.trainable);
  a->weights()[0].value = Tensor({3}, {1, 2, 3});
  a->weights()[1].value = Tensor({3}, {1, 4, 16});
  ExpectNear(Forward1(*a, Tensor({1, 1, 3}, {2, 2, 2}), true), {1, 0, -0.25f});
  EXPECT_EQ(CheckLayerGradients(*a, {RandomTensor({2, 5, 3}, 2)}), "");
  EXPECT_FALSE(MakeNormalization("n", o)->Build({{3}}, BuildContext{&rng}).ok());  // 2 values
}

// ---- Factories from Keras configs.

TEST(NormalizationFactoryTest, RealConfigsBuild) {
  std::mt19937_64 rng(1);
  // 007-mlp-batchnorm.json (Keras 2.0, no dtype).
  auto bn = FromJson(R"({"config": {"name": "batch_normalization_490", "epsilon": 0.001,
    "beta_initializer": {"config": {}, "class_name": "Zeros"}, "gamma_constraint": null,
    "beta_constraint": null, "moving_variance_initializer": {"config": {}, "class_name": "Ones"},
    "axis": -1, "scale": true, "gamma_initializer": {"config": {}, "class_name": "Ones"},
    "beta_regularizer": null, "momentum": 0.99, "gamma_regularizer": null, "trainable": true,
    "center": true, "moving_mean_initializer": {"config": {}, "class_name": "Zeros"}},
    "class_name": "BatchNormalization"})");
  ASSERT_TRUE(bn.ok()) << bn.status();
  ASSERT_TRUE((*bn)->Build({{64}}, BuildContext{&rng}).ok());
  EXPECT_EQ((*bn)->weights().size(), 4u);
  // 045-k3-seq-nested-resnet.json: axis 3, frozen, epsilon 1.001e-5.
  auto frozen = FromJson(R"({"module": "keras.layers", "class_name": "BatchNormalization",
    "config": {"name": "conv1_bn", "trainable": false, "dtype": {"module": "keras",
    "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null},
    "axis": 3, "momentum": 0.99, "epsilon": 1.001e-05, "center": true, "scale": true,
    "beta_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {},
    "registered_name": null}, "gamma_initializer": {"module": "keras.initializers",
    "class_name": "Ones", "config": {}, "registered_name": null}, "moving_mean_initializer": {
    "module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
    "moving_variance_initializer": {"module": "keras.initializers", "class_name": "Ones",
    "config": {}, "registered_name": null}, "beta_regularizer": null, "gamma_regularizer": null,
    "beta_constraint": null, "gamma_constraint": null, "synchronized": false},
    "registered_name": null, "build_config": {"input_shape": [null, 16, 16, 64]},
    "name": "conv1_bn"})",
                         true);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_FALSE((*frozen)->trainable());
  ASSERT_TRUE((*frozen)->Build({{16, 16, 64}}, BuildContext{&rng}).ok());
  EXPECT_FALSE(FindWeight(**frozen, "gamma")->trainable);
  // 009-gru-batchnorm-weather.json: axis [2] on [time, features].
  auto listed = FromJson(R"({"class_name": "BatchNormalization", "config": {
    "name": "batch_normalization", "trainable": true, "dtype": "float32", "axis": [2],
    "momentum": 0.99, "epsilon": 0.001, "center": true, "scale": true,
    "beta_initializer": {"class_name": "Zeros", "config": {}}, "gamma_initializer": {
    "class_name": "Ones", "config": {}}, "moving_mean_initializer": {"class_name": "Zeros",
    "config": {}}, "moving_variance_initializer": {"class_name": "Ones", "config": {}},
    "beta_regularizer": null, "gamma_regularizer": {"class_name": "L2", "config": {"l2": 0.1}},
    "beta_constraint": null, "gamma_constraint": null}})");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_TRUE((*listed)->Build({{24, 7}}, BuildContext{&rng}).ok());
  EXPECT_FLOAT_EQ(FindWeight(**listed, "gamma")->l2, 0.1f);
  // 019-cnn-transformer-mha.json: LayerNormalization axis [2]; Normalization axis [3] adapted.
  auto ln = FromJson(R"({"module": "keras.layers", "class_name": "LayerNormalization",
    "config": {"name": "layer_normalization_6", "trainable": true, "dtype": "float32",
    "axis": [2], "epsilon": 0.001, "center": true, "scale": true, "beta_initializer": {
    "module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
    "gamma_initializer": {"module": "keras.initializers", "class_name": "Ones", "config": {},
    "registered_name": null}, "beta_regularizer": null, "gamma_regularizer": null,
    "beta_constraint": null, "gamma_constraint": null}, "registered_name": null,
    "build_config": {"input_shape": [null, 49, 1280]}, "name": "layer_normalization_6"})");
  ASSERT_TRUE(ln.ok()) << ln.status();
  ASSERT_TRUE((*ln)->Build({{49, 1280}}, BuildContext{&rng}).ok());
  EXPECT_EQ((*ln)->weights()[0].value.shape(), Shape({1280}));
  auto norm = FromJson(R"({"module": "keras.layers", "class_name": "Normalization", "config": {
    "name": "normalization_10", "trainable": false, "dtype": "float32", "axis": [3],
    "invert": false, "mean": null, "variance": null}, "registered_name": null,
    "build_config": {"input_shape": [null, 224, 224, 3]}, "name": "normalization_10"})");
  ASSERT_TRUE(norm.ok()) << norm.status();
  ASSERT_TRUE((*norm)->Build({{224, 224, 3}}, BuildContext{&rng}).ok());
  EXPECT_EQ((*norm)->weights().size(), 3u);
  auto given = FromJson(R"({"class_name": "Normalization", "config": {"name": "n",
    "axis": -1, "mean": [[1.0, 2.0]], "variance": [[4.0, 9.0]], "invert": false}})",
                        true);
  ASSERT_TRUE(given.ok()) << given.status();
  ExpectNear(Forward1(**given, Tensor({1, 2}, {3, 5}), false), {1, 1});
  auto scalar = FromJson(R"({"class_name": "Normalization", "config": {"name": "n",
    "axis": null, "mean": 3.0, "variance": 4.0}})",
                         true);
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  ExpectNear(Forward1(**scalar, Tensor({1, 2, 2}, {3, 5, 7, 1}), false), {0, 1, 2, -1});
}

TEST(NormalizationFactoryTest, RefusalsNameTheOption) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"class_name": "BatchNormalization", "config": {"name": "bn", "synchronized": true}})",
       "layer 'bn' (BatchNormalization): option synchronized=true is not supported"},
      {R"({"class_name": "BatchNormalization", "config": {"name": "bn", "renorm": true,
        "renorm_clipping": null, "renorm_momentum": 0.99}})",
       "layer 'bn' (BatchNormalization): option renorm=true is not supported"},
      {R"({"class_name": "BatchNormalization", "config": {"name": "bn", "axis": [1, 2]}})",
       "layer 'bn' (BatchNormalization): option axis=[1,2] (only the last axis, channels-last) "
       "is not supported"},
      {R"({"class_name": "BatchNormalization", "config": {"name": "bn",
        "virtual_batch_size": 8}})",
       "layer 'bn' (BatchNormalization): option virtual_batch_size=8 is not supported"},
      {R"({"class_name": "BatchNormalization", "config": {"name": "bn",
        "gamma_constraint": {"class_name": "NonNeg", "config": {}}}})",
       "layer 'bn' (BatchNormalization): option gamma_constraint={\"class_name\":\"NonNeg\","
       "\"config\":{}} is not supported"},
      {R"({"class_name": "LayerNormalization", "config": {"name": "ln", "rms_scaling": true}})",
       "layer 'ln' (LayerNormalization): option rms_scaling=true is not supported"},
      {R"({"class_name": "LayerNormalization", "config": {"name": "ln", "mystery": 2}})",
       "layer 'ln' (LayerNormalization): option mystery=2 is not supported"},
      {R"({"class_name": "Normalization", "config": {"name": "n", "axis": [1, 2]}})",
       "layer 'n' (Normalization): option axis=[1,2] (only the last axis, channels-last) is not "
       "supported"},
      {R"({"class_name": "Normalization", "config": {"name": "n", "mean": [1.0]}})",
       "layer 'n' (Normalization): options mean and variance must be given together"},
  };
  for (const Case& c : cases) {
    auto l = FromJson(c.json);
    ASSERT_FALSE(l.ok()) << c.json;
    EXPECT_EQ(l.status().message(), c.message);
  }
}

}  // namespace
}  // namespace lockstep::trainer::graph
