// Which graph models the GPU engine takes (model/gpu_support.h), decided without a GPU: the
// test models that exercise every GPU op load, train on the CPU and are accepted; models with
// layers the GPU has no op for are refused naming the layer; the corpus files either pass or
// are refused that way.
#include "trainer/model/gpu_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <typeindex>

#include "trainer/layers/core/core.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/model/graph_model.h"
#include "trainer/testing/source_dir.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

using ::lockstep::trainer::testing::SourcePath;

TEST(GpuSupportTest, TheGpuTestModelsLoadTrainAndAreAccepted) {
  for (const char* path :
       {"examples/models/mlp.json", "examples/models/cnn.json", "examples/models/lstm.json",
        "examples/models/attention.json", "trainer/model/testdata/every_gpu_op.json",
        "trainer/model/testdata/tokens.json", "trainer/model/testdata/recurrent.json",
        "trainer/model/testdata/masked.json", "trainer/model/testdata/states.json"}) {
    SCOPED_TRACE(path);
    auto m = GraphModel::Load(SourcePath(path), 1);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(GpuSupported((*m)->graph()).ok()) << GpuSupported((*m)->graph());
    Shape s{4};
    for (int64_t d : (*m)->example_shape()) s.push_back(d);
    Tensor x(s);
    // Small integers: token ids for the Embedding, values for the rest.
    for (int64_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
    Dataset batch{.inputs = {x}, .targets = {Tensor()}};
    (*m)->Targets({0, 1, 2, 1}, &batch.targets[0]);
    const StepResult r = (*m)->TrainStep(batch);
    EXPECT_TRUE(std::isfinite(r.loss)) << r.loss;
    EXPECT_EQ((*m)->TakeInputError(), "");
  }
  // Every kind of layer the registry runs on the GPU appears in those models.
  const layers::Registry& registry = layers::Registry::Get();
  std::set<std::type_index> seen;
  for (const char* path :
       {"trainer/model/testdata/every_gpu_op.json", "trainer/model/testdata/tokens.json",
        "trainer/model/testdata/recurrent.json", "trainer/model/testdata/masked.json"}) {
    auto m = GraphModel::Load(SourcePath(path), 1);
    ASSERT_TRUE(m.ok());
    for (const auto& l : (*m)->graph().layers()) {
      ASSERT_TRUE(registry.Gpu(*l).ok()) << registry.Gpu(*l).status();
      seen.insert(l->options_type());
    }
  }
  EXPECT_EQ(seen.size(), registry.gpu_kinds());
  // In a CUDA build every one of them has its device op.
#ifdef LOCKSTEP_HAVE_CUDA
  EXPECT_EQ(registry.GpuOpsMissing(), std::vector<std::string>{});
#endif
}

// Where each node's mask comes from, read from the CPU layers themselves: the mask-making
// layers, pass-through layers, and layers that end a mask (a recurrent layer's last output, a
// pooling, a Flatten).
TEST(GpuSupportTest, MaskRulesFollowTheCpuLayers) {
  auto m = GraphModel::Load(SourcePath("trainer/model/testdata/masked.json"), 1);
  ASSERT_TRUE(m.ok()) << m.status();
  std::map<std::string, MaskRule> rules;
  for (const auto& l : (*m)->graph().layers()) rules[l->name()] = MaskRuleOf(*l);
  EXPECT_EQ(rules.at("embed"), MaskRule::kOwn);
  EXPECT_EQ(rules.at("embed_plain"), MaskRule::kNone);
  EXPECT_EQ(rules.at("masking"), MaskRule::kOwn);
  EXPECT_EQ(rules.at("not_equal"), MaskRule::kNone);
  EXPECT_EQ(rules.at("lstm"), MaskRule::kFirstInput);  // return_sequences
  EXPECT_EQ(rules.at("rnn"), MaskRule::kNone);         // the last output only
  EXPECT_EQ(rules.at("bidi"), MaskRule::kFirstInput);
  EXPECT_EQ(rules.at("mha"), MaskRule::kFirstInput);  // the query's
  EXPECT_EQ(rules.at("pool_mha"), MaskRule::kNone);
  EXPECT_EQ(rules.at("logits"), MaskRule::kFirstInput);
  size_t with = 0;  // the GRU's mask= argument
  for (const auto& l : (*m)->graph().layers()) {
    if (OptionsOf<graph::MaskWithOptions>(*l)) {
      ++with;
      EXPECT_EQ(MaskRuleOf(*l), MaskRule::kOwn);
    }
  }
  EXPECT_EQ(with, 1u);
}

TEST(GpuSupportTest, LayersWithoutAGpuOpAreNamed) {
  auto masked = keras::LoadKerasModel(
      nlohmann::json{{"class_name", "Sequential"},
                     {"config",
                      {{{"class_name", "Embedding"},
                        {"config",
                         {{"name", "e"},
                          {"input_dim", 10},
                          {"output_dim", 4},
                          {"mask_zero", true},
                          {"batch_input_shape", {nullptr, 5}}}}},
                       {{"class_name", "GlobalAveragePooling1D"}, {"config", {{"name", "p"}}}}}}});
  ASSERT_TRUE(masked.ok()) << masked.status();
  absl::Status s = GpuSupported(*masked->graph);
  EXPECT_TRUE(s.ok()) << s;  // the mask flows to the pooling
  // A BatchNormalization given a mask (masked batch statistics), directly and after layers that
  // pass the mask on; none without the mask.
  auto batchnorm = [](bool mask_zero, bool dense_between) {
    nlohmann::json layers = {{{"class_name", "Embedding"},
                              {"config",
                               {{"name", "e"},
                                {"input_dim", 10},
                                {"output_dim", 4},
                                {"mask_zero", mask_zero},
                                {"batch_input_shape", {nullptr, 5}}}}}};
    if (dense_between) {
      layers.push_back({{"class_name", "Dense"}, {"config", {{"name", "d"}, {"units", 3}}}});
    }
    layers.push_back({{"class_name", "BatchNormalization"}, {"config", {{"name", "bn"}}}});
    auto k = keras::LoadKerasModel(
        nlohmann::json{{"class_name", "Sequential"}, {"config", std::move(layers)}});
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? GpuSupported(*k->graph) : k.status();
  };
  for (bool between : {false, true}) {
    s = batchnorm(true, between);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("layer 'bn' (BatchNormalization) has no GPU implementation yet: it "
                               "receives a mask"),
              std::string::npos)
        << s;
    EXPECT_TRUE(batchnorm(false, between).ok()) << batchnorm(false, between);
  }
  // A recurrent layer with dropout, and one that returns its state.
  auto gru = [](nlohmann::json extra) {
    nlohmann::json cfg = {{"name", "g"}, {"units", 2}, {"batch_input_shape", {nullptr, 5, 3}}};
    if (extra.is_object()) cfg.update(extra);
    auto k = keras::LoadKerasModel(nlohmann::json{
        {"class_name", "Sequential"}, {"config", {{{"class_name", "GRU"}, {"config", cfg}}}}});
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? GpuSupported(*k->graph) : k.status();
  };
  EXPECT_TRUE(gru({}).ok()) << gru({});
  EXPECT_NE(gru({{"dropout", 0.2}}).message().find("input or recurrent dropout"),
            std::string::npos);
  EXPECT_NE(gru({{"activation", "softmax"}}).message().find("softmax"), std::string::npos);
  // Recurrent layers' states in and out run there (states.json); a Bidirectional's not yet.
  graph::RnnOptions state;
  state.return_state = true;
  auto lstm = graph::MakeRnn("l", RnnCell::kLstm, state);
  EXPECT_TRUE(layers::Registry::Get().GpuSupported(*lstm, {.outputs = 3}).ok());

  // A ReLU layer the activations cannot express; weight and activity regularizers run there.
  EXPECT_FALSE(graph::ReluActivation({.max_value = 6.0f, .negative_slope = 0.1f, .threshold = 0}));
  EXPECT_FALSE(
      graph::ReluActivation({.max_value = 3.4e38f, .negative_slope = 0, .threshold = 1.0f}));
  EXPECT_EQ(graph::ReluActivation({.max_value = 6.0f})->kind, Act::kRelu6);
  EXPECT_EQ(graph::ReluActivation({.negative_slope = 0.3f})->kind, Act::kLeakyRelu);
  // A Dense layer with one regularizer option.
  auto dense = [](const char* option, nlohmann::json regularizer) {
    auto m = keras::LoadKerasModel(nlohmann::json{{"class_name", "Sequential"},
                                                  {"config",
                                                   {{{"class_name", "Dense"},
                                                     {"config",
                                                      {{"name", "d"},
                                                       {"units", 2},
                                                       {"batch_input_shape", {nullptr, 3}},
                                                       {option, std::move(regularizer)}}}}}}});
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? GpuSupported(*m->graph) : m.status();
  };
  s = dense("kernel_regularizer", {{"class_name", "L2"}, {"config", {{"l2", 0.01}}}});
  EXPECT_TRUE(s.ok()) << s;
  s = dense("activity_regularizer", {{"class_name", "L1"}, {"config", {{"l1", 0.01}}}});
  EXPECT_TRUE(s.ok()) << s;
}

TEST(GpuSupportTest, CorpusModelsAreAcceptedOrRefusedByLayer) {
  const fs::path dir =
      fs::path(LOCKSTEP_SOURCE_DIR) / ".." / "shared" / "testdata" / "keras-configs";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " is absent";
  int accepted = 0, refused = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    absl::StatusOr<keras::KerasModel> m = keras::LoadKerasModelFile(e.path().string(), {.seed = 1});
    if (!m.ok()) continue;  // the corpus test covers refusals at load
    const absl::Status s = GpuSupported(*m->graph);
    if (s.ok()) {
      ++accepted;
    } else {
      ++refused;
      std::cout << e.path().filename().string() << ": " << s.message() << "\n";
      EXPECT_NE(s.message().find("has no GPU implementation yet"), std::string::npos)
          << e.path() << ": " << s;
    }
  }
  std::cout << accepted << " corpus models run on the GPU, " << refused
            << " have a layer without a GPU op\n";
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace lockstep::trainer
