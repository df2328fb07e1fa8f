// LayerConfig: nothing is silently ignored.
#include "trainer/keras/layer_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {
namespace {

using nlohmann::json;

TEST(LayerConfigTest, UnreadOptionsAreRefusedByName) {
  LayerConfig c(json{{"units", 3}, {"mystery", true}}, "d", "Dense", false);
  EXPECT_EQ(c.Int("units", 1), 3);
  absl::Status s = c.Finish();
  EXPECT_EQ(s.message(), "layer 'd' (Dense): option mystery=true is not supported");
}

TEST(LayerConfigTest, ExpectRefusesOtherValues) {
  LayerConfig c(json{{"stateful", true}}, "l", "LSTM", false);
  c.Expect("stateful", false);
  EXPECT_EQ(c.Finish().message(), "layer 'l' (LSTM): option stateful=true is not supported");
  LayerConfig ok(json{{"stateful", false}, {"kernel_constraint", nullptr}}, "l", "LSTM", false);
  ok.Expect("stateful", false);
  ok.Expect("kernel_constraint", nullptr);
  EXPECT_TRUE(ok.Finish().ok());
}

TEST(LayerConfigTest, InitializersInEveryKerasSpelling) {
  LayerConfig c(
      json{{"a", "he_normal"},
           {"b",
            {{"class_name", "VarianceScaling"},
             {"config",
              {{"scale", 2.0}, {"mode", "fan_out"}, {"distribution", "normal"}, {"seed", 5}}}}},
           {"c",
            {{"module", "keras.initializers"},
             {"class_name", "RandomUniform"},
             {"config", {{"minval", -0.1}, {"maxval", 0.2}, {"seed", nullptr}}},
             {"registered_name", nullptr}}}},
      "x", "Dense", true);
  graph::Initializer a = c.Initializer("a", graph::Zeros());
  EXPECT_EQ(a.kind, graph::Initializer::Kind::kVarianceScaling);
  EXPECT_EQ(a.scale, 2);
  graph::Initializer b = c.Initializer("b", graph::Zeros());
  EXPECT_EQ(b.mode, graph::Initializer::Mode::kFanOut);
  EXPECT_EQ(b.seed, 5);
  graph::Initializer u = c.Initializer("c", graph::Zeros());
  EXPECT_EQ(u.kind, graph::Initializer::Kind::kRandomUniform);
  EXPECT_FLOAT_EQ(u.maxval, 0.2f);
  EXPECT_TRUE(c.Finish().ok());
  LayerConfig k3(json{{"o",
                       {{"module", "keras.initializers"},
                        {"class_name", "OrthogonalInitializer"},
                        {"config", {{"gain", 2.0}, {"seed", nullptr}}}}}},
                 "x", "LSTM", true);
  graph::Initializer orth = k3.Initializer("o", graph::Zeros());
  EXPECT_EQ(orth.kind, graph::Initializer::Kind::kOrthogonal);
  EXPECT_EQ(orth.value, 2.0f);
  EXPECT_TRUE(k3.Finish().ok());
  LayerConfig bad(json{{"k", "my_init"}}, "x", "Dense", true);
  bad.Initializer("k", graph::Zeros());
  EXPECT_FALSE(bad.Finish().ok());
}

TEST(LayerConfigTest, SeededInitializersRepeatAndFollowTheirDistribution) {
  graph::Initializer i = graph::GlorotUniform();
  i.seed = 3;
  std::mt19937_64 r1(1), r2(2);
  Tensor a = graph::Initialize(i, {20, 30}, &r1), b = graph::Initialize(i, {20, 30}, &r2);
  EXPECT_EQ(a, b);
  const float limit = std::sqrt(6.0f / 50.0f);
  for (float v : a.values()) EXPECT_LE(std::abs(v), limit);
  graph::Initializer o;
  o.kind = graph::Initializer::Kind::kOrthogonal;
  Tensor q = graph::Initialize(o, {4, 8}, &r1);  // rows orthonormal
  for (int r = 0; r < 4; ++r) {
    for (int s = 0; s < 4; ++s) {
      double dot = 0;
      for (int k = 0; k < 8; ++k) dot += q[r * 8 + k] * q[s * 8 + k];
      EXPECT_NEAR(dot, r == s ? 1.0 : 0.0, 1e-5);
    }
  }
}

TEST(LayerConfigTest, FactoriesRefuseCodeLayersAndUnknownClasses) {
  const LayerFactories& f = LayerFactories::Get();
  auto lambda = f.Build(json{{"class_name", "Lambda"}, {"config", {{"name", "lam"}}}}, false);
  EXPECT_NE(lambda.status().message().find("layer 'lam' (Lambda): a Lambda layer holds Python"),
            std::string::npos)
      << lambda.status();
  auto custom = f.Build(json{{"class_name", "PixelShuffler"}, {"config", {{"name", "ps"}}}}, false);
  EXPECT_NE(custom.status().message().find("layer 'ps' (PixelShuffler): the layer class is not"),
            std::string::npos);
  auto cf = f.Build(json{{"class_name", "Dense"},
                         {"config", {{"name", "d"}, {"units", 2}, {"dtype", "float64"}}}},
                    false);
  EXPECT_NE(cf.status().message().find("dtype \"float64\""), std::string::npos) << cf.status();
  auto ok = f.Build(json{{"class_name", "Dense"},
                         {"config",
                          {{"name", "d"},
                           {"units", 2},
                           {"activation", "relu"},
                           {"kernel_constraint", nullptr},
                           {"trainable", false}}}},
                    false);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE((*ok)->trainable());
}

}  // namespace
}  // namespace lockstep::trainer::keras

namespace lockstep::trainer::keras {
namespace {

// docs/reference/keras-layers.md lists the layer classes a model file may use: exactly the
// classes the factories build, each once, as "| `ClassName` |" rows.
TEST(LayerConfigTest, TheReferenceListsEveryLayerClassAndNoOther) {
  std::ifstream in(std::string(LOCKSTEP_SOURCE_DIR) + "/docs/reference/keras-layers.md");
  ASSERT_TRUE(in) << "docs/reference/keras-layers.md is missing";
  std::set<std::string> documented;
  const std::regex row(R"(^\| `([A-Za-z0-9]+)` \|)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) {
      EXPECT_TRUE(documented.insert(m[1]).second) << m[1] << " is listed twice";
    }
  }
  std::vector<std::string> names = LayerFactories::Get().Names();
  const std::set<std::string> built(names.begin(), names.end());
  for (const std::string& n : built) EXPECT_TRUE(documented.count(n)) << n << " is not listed";
  for (const std::string& n : documented) EXPECT_TRUE(built.count(n)) << n << " is not built";
}

}  // namespace
}  // namespace lockstep::trainer::keras
