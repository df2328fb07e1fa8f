// MultiHeadAttention against finite differences, hand-computed cases, the corpus config and
// PyTorch (trainer/graph/oracle/).
#include "trainer/layers/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/graph/testing/gradcheck.h"
#include "trainer/graph/testing/torch_oracle.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::graph {
namespace {

using nlohmann::json;
using testing::CheckLayerGradients;
using testing::GradCheckOptions;
using testing::RandomTensor;

constexpr char kOracle[] = "trainer/graph/oracle/recurrent_attention_oracle.py";

MultiHeadAttentionOptions Heads(int64_t heads, int64_t key_dim, int64_t value_dim = 0) {
  MultiHeadAttentionOptions o;
  o.num_heads = heads;
  o.key_dim = key_dim;
  o.value_dim = value_dim;
  o.bias_initializer.kind = Initializer::Kind::kRandomUniform;
  o.bias_initializer.minval = -0.3f;
  o.bias_initializer.maxval = 0.3f;
  return o;
}

std::vector<float> Forward(Layer& l, const std::vector<Tensor>& x,
                           std::vector<const Tensor*> masks = {}, std::string* error = nullptr) {
  std::vector<Shape> shapes;
  for (const Tensor& t : x) shapes.emplace_back(t.shape().begin() + 1, t.shape().end());
  std::mt19937_64 rng(1);
  EXPECT_TRUE(l.Build(shapes, BuildContext{&rng}).ok());
  Args a;
  for (size_t i = 0; i < x.size(); ++i) {
    a.x.push_back(&x[i]);
    a.mask.push_back(i < masks.size() ? masks[i] : nullptr);
  }
  std::vector<Tensor> out(1);
  Saved s;
  l.Forward(a, &out, &s, CallContext{false, &rng, error});
  return out[0].values();
}

TEST(MultiHeadAttentionTest, OneHeadByHandWithValueMasks) {
  // Identity projections of width 1: the query 2 scores the keys 1 and 3 as 2 and 6.
  MultiHeadAttentionOptions o = Heads(1, 1);
  o.use_bias = false;
  auto l = MakeMultiHeadAttention("mha", o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(l->Build({{1, 1}, {2, 1}}, BuildContext{&rng}).ok());
  for (Weight& w : l->weights()) w.value.Fill(1.0f);
  Tensor q({1, 1, 1}, 2.0f), v({1, 2, 1}, {1, 3});
  const double e2 = std::exp(2.0), e6 = std::exp(6.0);
  EXPECT_NEAR(Forward(*l, {q, v})[0], (e2 * 1 + e6 * 3) / (e2 + e6), 1e-5);
  Tensor first({1, 2}, {1, 0}), none({1, 2}, {0, 0});
  EXPECT_NEAR(Forward(*l, {q, v}, {nullptr, &first})[0], 1.0, 1e-6);
  EXPECT_NEAR(Forward(*l, {q, v}, {nullptr, &none})[0], 2.0, 1e-6);  // uniform, as Keras's -1e9
  // A key mask acts as the value's; the scale is 1/sqrt(key_dim).
  Tensor k({1, 2, 1}, {1, 1});
  EXPECT_NEAR(Forward(*l, {q, v, k})[0], 2.0, 1e-6);
  EXPECT_NEAR(Forward(*l, {q, v, v}, {nullptr, nullptr, &first})[0], 1.0, 1e-6);
  EXPECT_EQ(l->weights().size(), 4u);
}

TEST(MultiHeadAttentionTest, WeightsHaveKerasNamesAndLayouts) {
  auto l = MakeMultiHeadAttention("mha", Heads(4, 8, 6));
  std::mt19937_64 rng(1);
  auto out = l->Build({{7, 16}, {9, 12}, {9, 10}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], Shape({7, 16}));
  std::vector<std::pair<std::string, Shape>> got;
  for (const Weight& w : l->weights()) got.emplace_back(w.name, w.value.shape());
  EXPECT_EQ(got, (std::vector<std::pair<std::string, Shape>>{
                     {"query/kernel", {16, 4, 8}},
                     {"query/bias", {4, 8}},
                     {"key/kernel", {10, 4, 8}},
                     {"key/bias", {4, 8}},
                     {"value/kernel", {12, 4, 6}},
                     {"value/bias", {4, 6}},
                     {"attention_output/kernel", {4, 6, 16}},
                     {"attention_output/bias", {16}},
                 }));
  // Shapes it cannot take.
  auto m = MakeMultiHeadAttention("mha", Heads(2, 3));
  EXPECT_FALSE(m->Build({{7, 16}}, BuildContext{&rng}).ok());
  EXPECT_FALSE(m->Build({{7, 16}, {9, 12}, {8, 12}}, BuildContext{&rng}).ok());
  EXPECT_FALSE(m->Build({{7, 16}, {3, 9, 12}}, BuildContext{&rng}).ok());
  MultiHeadAttentionOptions axes = Heads(2, 3);
  axes.attention_axes = {2};
  EXPECT_FALSE(MakeMultiHeadAttention("mha", axes)->Build({{7, 16}, {9, 12}}, {&rng}).ok());
  axes.attention_axes = {-2};
  EXPECT_TRUE(MakeMultiHeadAttention("mha", axes)->Build({{7, 16}, {9, 12}}, {&rng}).ok());
}

TEST(MultiHeadAttentionTest, GradientsWithAndWithoutKeyAndUnderMasks) {
  Tensor q = RandomTensor({2, 3, 5}, 1), v = RandomTensor({2, 4, 6}, 2),
         k = RandomTensor({2, 4, 3}, 3);
  Tensor vmask({2, 4}, {1, 1, 1, 0, 1, 1, 0, 0});
  Tensor qmask({2, 3}, {1, 0, 1, 1, 1, 1});
  Tensor kmask({2, 4}, {1, 0, 1, 1, 1, 1, 1, 0});
  EXPECT_EQ(CheckLayerGradients(*MakeMultiHeadAttention("a", Heads(2, 3)), {q, v}), "");
  EXPECT_EQ(CheckLayerGradients(*MakeMultiHeadAttention("a", Heads(2, 3, 4)), {q, v, k}), "");
  GradCheckOptions masked;
  masked.masks = {nullptr, &vmask};
  EXPECT_EQ(CheckLayerGradients(*MakeMultiHeadAttention("a", Heads(3, 2)), {q, v}, masked), "");
  GradCheckOptions all;
  all.masks = {&qmask, &vmask, &kmask};
  EXPECT_EQ(CheckLayerGradients(*MakeMultiHeadAttention("a", Heads(2, 2, 3)), {q, v, k}, all), "");
  // Self-attention with a causal mask, without biases, and with dropout on the probabilities.
  MultiHeadAttentionOptions c = Heads(2, 4);
  c.use_causal_mask = true;
  c.use_bias = false;
  Tensor x = RandomTensor({2, 4, 6}, 4);
  EXPECT_EQ(CheckLayerGradients(*MakeMultiHeadAttention("a", c), {x, x}), "");
  MultiHeadAttentionOptions d = Heads(2, 3);
  d.dropout = 0.3f;
  EXPECT_EQ(CheckLayerGradients(*MakeMultiHeadAttention("a", d), {q, v}), "");
  // Attention over two axes at once ([batch, h, w, c]).
  EXPECT_EQ(CheckLayerGradients(*MakeMultiHeadAttention("a", Heads(2, 2)),
                                {RandomTensor({2, 2, 3, 4}, 5), RandomTensor({2, 2, 2, 3}, 6)}),
            "");
}

TEST(MultiHeadAttentionTest, CausalMaskAndQueryMaskFollowKeras) {
  MultiHeadAttentionOptions o = Heads(1, 2);
  o.use_causal_mask = true;
  auto causal = MakeMultiHeadAttention("a", o);
  Tensor x = RandomTensor({1, 3, 4}, 7);
  const std::vector<float> full = Forward(*causal, {x, x});
  // The first step attends only to itself: changing later steps leaves it unchanged.
  Tensor later = x;
  for (int64_t j = 4; j < 12; ++j) later[j] += 1.0f;
  // Only the value changes here, so only keys and values move.
  const std::vector<float> moved = Forward(*causal, {x, later});
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_EQ(moved[static_cast<size_t>(j)], full[static_cast<size_t>(j)]);
  EXPECT_NE(moved[4], full[4]);
  // The output keeps the query's mask.
  auto l = MakeMultiHeadAttention("a", Heads(1, 2));
  Tensor qm({1, 3}, {1, 1, 0});
  Forward(*l, {x, x});
  Saved s;
  EXPECT_EQ(l->OutputMask(Args{{&x, &x}, {&qm, nullptr}}, s), &qm);
  // A mask of another length is reported.
  Tensor bad({1, 5}, {1, 1, 1, 1, 1});
  std::string error;
  Forward(*l, {x, x}, {nullptr, &bad}, &error);
  EXPECT_NE(error.find("does not fit"), std::string::npos) << error;
}

// From 019-cnn-transformer-mha.json (Keras 2.13).
constexpr char k019Mha[] =
    R"({"module": "keras.layers", "class_name": "MultiHeadAttention", "config": {"name": "multi_head_attention_3", "trainable": true, "dtype": "float32", "num_heads": 4, "key_dim": 128, "value_dim": 128, "dropout": 0.0, "use_bias": true, "output_shape": null, "attention_axes": [1], "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null}, "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null}, "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null, "query_shape": [null, 49, 1280], "key_shape": [null, 49, 1280], "value_shape": [null, 49, 1280]}, "registered_name": null})";

TEST(MultiHeadAttentionFactoryTest, BuildsTheCorpusConfigAndRefusesTheRest) {
  const auto& f = keras::LayerFactories::Get();
  auto l = f.Build(json::parse(k019Mha), false);
  ASSERT_TRUE(l.ok()) << l.status();
  std::mt19937_64 rng(1);
  auto out = (*l)->Build({{49, 1280}, {49, 1280}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], Shape({49, 1280}));
  EXPECT_EQ((*l)->weights()[0].name, "query/kernel");
  EXPECT_EQ((*l)->weights()[0].value.shape(), Shape({1280, 4, 128}));
  EXPECT_EQ((*l)->weights()[6].value.shape(), Shape({4, 128, 1280}));
  // Keras 3 spells some options its own way.
  auto k3 = f.Build(json::parse(R"({"class_name": "MultiHeadAttention", "config": {"name": "m",
      "num_heads": 2, "key_dim": 4, "value_dim": null, "dropout": 0.1, "use_bias": true,
      "output_shape": null, "attention_axes": null, "flash_attention": null, "seed": 3,
      "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
      "config": {"seed": null}, "registered_name": null}}})"),
                    true);
  ASSERT_TRUE(k3.ok()) << k3.status();
  ASSERT_TRUE((*k3)->Build({{5, 8}, {6, 8}}, BuildContext{&rng}).ok());
  EXPECT_EQ((*k3)->weights()[4].value.shape(), Shape({8, 2, 4}));  // value_dim = key_dim
  auto with = [&](const std::string& key, const json& value) {
    json j = json::parse(k019Mha);
    j["config"][key] = value;
    return f.Build(j, false);
  };
  EXPECT_EQ(with("output_shape", json::array({64})).status().message(),
            "layer 'multi_head_attention_3' (MultiHeadAttention): option output_shape=[64] is "
            "not supported");
  EXPECT_FALSE(with("kernel_constraint", json{{"class_name", "MaxNorm"}}).ok());
  EXPECT_FALSE(with("mystery", 1).ok());
  auto axes = with("attention_axes", json::array({2}));
  ASSERT_TRUE(axes.ok());
  EXPECT_FALSE((*axes)->Build({{49, 1280}, {49, 1280}}, BuildContext{&rng}).ok());
}

TEST(MultiHeadAttentionOracleTest, MatchesKerasMathInPyTorch) {
  absl::StatusOr<json> j = testing::RunTorchOracle(kOracle, "mha");
  if (absl::IsUnavailable(j.status())) GTEST_SKIP() << j.status();
  ASSERT_TRUE(j.ok()) << j.status();
  auto made = keras::LayerFactories::Get().Build((*j)["config"], (*j)["keras3"].get<bool>());
  ASSERT_TRUE(made.ok()) << made.status();
  Layer& l = **made;
  std::vector<Tensor> x;
  for (const json& t : (*j)["inputs"]) x.push_back(testing::TensorFromJson(t));
  std::vector<Tensor> masks(x.size());
  Args a;
  for (size_t i = 0; i < x.size(); ++i) {
    const json& m = (*j)["masks"][i];
    if (!m.is_null()) masks[i] = testing::TensorFromJson(m);
    a.x.push_back(&x[i]);
    a.mask.push_back(m.is_null() ? nullptr : &masks[i]);
  }
  std::vector<Shape> shapes;
  for (const Tensor& t : x) shapes.emplace_back(t.shape().begin() + 1, t.shape().end());
  std::mt19937_64 rng(1);
  ASSERT_TRUE(l.Build(shapes, BuildContext{&rng}).ok());
  ASSERT_EQ(l.weights().size(), (*j)["weights"].size());
  for (Weight& w : l.weights()) {
    ASSERT_TRUE((*j)["weights"].contains(w.name)) << w.name;
    w.value = testing::TensorFromJson((*j)["weights"][w.name]);
    w.grad.Fill(0.0f);
  }
  std::vector<Tensor> out(1);
  Saved s;
  l.Forward(a, &out, &s, CallContext{false, &rng});
  EXPECT_LT(testing::MaxRelativeError(out[0], testing::TensorFromJson((*j)["outputs"][0])), 1e-4);
  Tensor r = testing::TensorFromJson((*j)["projections"][0]);
  std::vector<Tensor> din(x.size());
  l.Backward(a, out, {&r}, std::vector<bool>(x.size(), true), &din, &s);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LT(testing::MaxRelativeError(din[i], testing::TensorFromJson((*j)["input_grads"][i])),
              1e-4)
        << "input " << i;
  }
  for (Weight& w : l.weights()) {
    EXPECT_LT(
        testing::MaxRelativeError(w.grad, testing::TensorFromJson((*j)["weight_grads"][w.name])),
        1e-4)
        << w.name;
  }
}

}  // namespace
}  // namespace lockstep::trainer::graph
