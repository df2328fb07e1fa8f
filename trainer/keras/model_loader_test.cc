// The loader on small configs in each format Keras writes, and its refusals.
#include "trainer/keras/model_loader.h"

#include <gtest/gtest.h>
#include <zip.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "trainer/graph/testing/gradcheck.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer::keras {
namespace {

using nlohmann::json;

json Dense(const std::string& name, int64_t units, const char* act = "linear") {
  return {{"class_name", "Dense"},
          {"config", {{"name", name}, {"units", units}, {"activation", act}}}};
}

TEST(ModelLoaderTest, Keras2SequentialAsAListWithTheShapeOnTheFirstLayer) {
  json first = Dense("d1", 5, "relu");
  first["config"]["batch_input_shape"] = {nullptr, 3};
  json doc = {{"class_name", "Sequential"},
              {"keras_version", "2.1.2"},
              {"config", json::array({first, Dense("d2", 2, "softmax")})}};
  auto m = LoadKerasModel(doc);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format, "keras2-sequential");
  EXPECT_EQ(m->graph->NumParams(), 3 * 5 + 5 + 5 * 2 + 2);
  EXPECT_EQ(m->graph->shape(m->graph->outputs()[0]), Shape({2}));
  EXPECT_EQ(m->output_names, std::vector<std::string>{"d2"});
}

TEST(ModelLoaderTest, Keras2SequentialWithAnInputLayerAndNoShapeIsRefused) {
  json input = {{"class_name", "InputLayer"},
                {"config",
                 {{"batch_input_shape", {nullptr, 4}},
                  {"dtype", "float32"},
                  {"sparse", false},
                  {"ragged", false},
                  {"name", "in"}}}};
  json doc = {{"class_name", "Sequential"},
              {"config", {{"name", "s"}, {"layers", {input, Dense("d", 3)}}}}};
  auto m = LoadKerasModel(doc);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph->input_name(0), "in");
  json none = {{"class_name", "Sequential"},
               {"config", {{"name", "s"}, {"layers", {Dense("d", 3)}}}}};
  auto bad = LoadKerasModel(none);
  EXPECT_NE(bad.status().message().find("declares no input shape"), std::string::npos)
      << bad.status();
}

// A functional model with a layer shared by two inputs, as Keras 2 writes it.
json SharedFunctional() {
  auto input = [](const char* n) {
    return json{{"class_name", "InputLayer"},
                {"name", n},
                {"config", {{"batch_input_shape", {nullptr, 4}}, {"name", n}}},
                {"inbound_nodes", json::array()}};
  };
  json shared = Dense("shared", 3, "tanh");
  shared["name"] = "shared";
  shared["inbound_nodes"] = {{{"a", 0, 0, json::object()}}, {{"b", 0, 0, json::object()}}};
  json add = {
      {"class_name", "Add"},
      {"name", "add"},
      {"config", {{"name", "add"}}},
      {"inbound_nodes", {{{"shared", 0, 0, json::object()}, {"shared", 1, 0, json::object()}}}}};
  json out = Dense("out", 2);
  out["name"] = "out";
  out["inbound_nodes"] = {{{"add", 0, 0, json::object()}}};
  return {{"class_name", "Functional"},
          {"config",
           {{"name", "m"},
            {"layers", {input("a"), input("b"), shared, add, out}},
            {"input_layers", {{"a", 0, 0}, {"b", 0, 0}}},
            {"output_layers", {{"out", 0, 0}}}}}};
}

TEST(ModelLoaderTest, Keras2FunctionalSharesALayerCalledTwice) {
  auto m = LoadKerasModel(SharedFunctional());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format, "keras2-functional");
  EXPECT_EQ(m->graph->num_inputs(), 2u);
  EXPECT_EQ(m->graph->Params().size(), 4u);
  EXPECT_EQ(m->graph->num_nodes(), 4u);
  EXPECT_EQ(
      graph::testing::CheckGraphGradients(*m->graph, {graph::testing::RandomTensor({2, 4}, 1),
                                                      graph::testing::RandomTensor({2, 4}, 2)}),
      "");
}

TEST(ModelLoaderTest, ANestedModelCalledTwiceSharesItsWeights) {
  // Keras 2 numbers a nested model's calls from 1.
  json inner = SharedFunctional();
  inner["name"] = "inner";
  inner["config"]["name"] = "inner";
  inner["inbound_nodes"] = {{{"x", 0, 0, json::object()}, {"y", 0, 0, json::object()}},
                            {{"y", 0, 0, json::object()}, {"x", 0, 0, json::object()}}};
  auto input = [](const char* n) {
    return json{{"class_name", "InputLayer"},
                {"name", n},
                {"config", {{"batch_input_shape", {nullptr, 4}}, {"name", n}}},
                {"inbound_nodes", json::array()}};
  };
  json cat = {
      {"class_name", "Concatenate"},
      {"name", "cat"},
      {"config", {{"name", "cat"}, {"axis", -1}}},
      {"inbound_nodes", {{{"inner", 1, 0, json::object()}, {"inner", 2, 0, json::object()}}}}};
  json outer = {{"class_name", "Functional"},
                {"config",
                 {{"name", "outer"},
                  {"layers", {input("x"), input("y"), inner, cat}},
                  {"input_layers", {{"x", 0, 0}, {"y", 0, 0}}},
                  {"output_layers", {{"cat", 0, 0}}}}}};
  auto m = LoadKerasModel(outer);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph->Params().size(), 4u);  // one set, called twice
  EXPECT_EQ(m->graph->shape(m->graph->outputs()[0]), Shape({4}));
}

TEST(ModelLoaderTest, Keras3FunctionalWithTensorsInCallArguments) {
  auto kt = [](const char* layer) {
    return json{
        {"class_name", "__keras_tensor__"},
        {"config",
         {{"shape", {nullptr, 6}}, {"dtype", "float32"}, {"keras_history", {layer, 0, 0}}}}};
  };
  json policy = {{"module", "keras"},
                 {"class_name", "DTypePolicy"},
                 {"config", {{"name", "float32"}}},
                 {"registered_name", nullptr}};
  json input = {
      {"module", "keras.layers"},
      {"class_name", "InputLayer"},
      {"config",
       {{"batch_shape", {nullptr, 6}}, {"dtype", "float32"}, {"sparse", false}, {"name", "ids"}}},
      {"registered_name", nullptr},
      {"name", "ids"},
      {"inbound_nodes", json::array()}};
  json ne = {{"module", "keras.src.ops.numpy"},
             {"class_name", "NotEqual"},
             {"config", {{"name", "not_equal"}}},
             {"registered_name", "NotEqual"},
             {"name", "not_equal"},
             {"inbound_nodes", {{{"args", {kt("ids"), 0}}, {"kwargs", json::object()}}}}};
  json dense = {{"module", "keras.layers"},
                {"class_name", "Dense"},
                {"config", {{"name", "d"}, {"units", 2}, {"dtype", policy}, {"trainable", true}}},
                {"registered_name", nullptr},
                {"build_config", {{"input_shape", {nullptr, 6}}}},
                {"name", "d"},
                {"inbound_nodes",
                 {{{"args", {kt("ids")}}, {"kwargs", {{"training", false}, {"mask", nullptr}}}}}}};
  json mul = {
      {"module", "keras.layers"},
      {"class_name", "Multiply"},
      {"config", {{"name", "mul"}, {"dtype", policy}}},
      {"registered_name", nullptr},
      {"name", "mul"},
      {"inbound_nodes", {{{"args", {{kt("ids"), kt("not_equal")}}}, {"kwargs", json::object()}}}}};
  json doc = {{"module", "keras"},
              {"class_name", "Functional"},
              {"config",
               {{"name", "f"},
                {"trainable", true},
                {"layers", {input, ne, dense, mul}},
                {"input_layers", {{"ids", 0, 0}}},
                {"output_layers", {{"d", 0, 0}, {"mul", 0, 0}}}}},
              {"registered_name", nullptr},
              {"compile_config", {{"loss", "mse"}, {"optimizer", "adam"}}}};
  auto m = LoadKerasModel(doc);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format, "keras3");
  EXPECT_EQ(m->training_config["loss"], "mse");
  EXPECT_EQ(m->graph->outputs().size(), 2u);
  Tensor x({1, 6}, {0, 1, 2, 0, 3, 0});
  m->graph->Forward({&x}, graph::CallContext{});
  EXPECT_EQ(m->graph->output(1), Tensor({1, 6}, {0, 1, 2, 0, 3, 0}));
}

TEST(ModelLoaderTest, TfjsModelTopologyAndItsTrainingConfig) {
  json first = Dense("d1", 4, "relu");
  first["config"]["batch_input_shape"] = {nullptr, 5};
  json doc = {{"format", "layers-model"},
              {"modelTopology",
               {{"keras_version", "2.15.0"},
                {"model_config",
                 {{"class_name", "Sequential"},
                  {"config", {{"name", "s"}, {"layers", {first, Dense("d2", 3, "softmax")}}}}}},
                {"training_config", {{"loss", "sparse_categorical_crossentropy"}}}}},
              {"weightsManifest", json::array()}};
  auto m = LoadKerasModel(doc);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format, "tfjs");
  EXPECT_EQ(m->training_config["loss"], "sparse_categorical_crossentropy");
}

// The TF.js converter 4.x writes some config keys in camelCase (batchInputShape).
TEST(ModelLoaderTest, TfjsCamelCaseConfigKeysReadAsKerassSnakeCase) {
  json first = Dense("d1", 4, "relu");
  first["config"]["batchInputShape"] = {nullptr, 5};
  first["config"]["useBias"] = false;
  json doc = {{"modelTopology",
               {{"class_name", "Sequential"},
                {"config", {{"name", "s"}, {"layers", {first, Dense("d2", 3, "softmax")}}}}}}};
  auto m = LoadKerasModel(doc);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph->shape(m->graph->inputs()[0]), Shape({5}));
  EXPECT_EQ(m->graph->NumParams(), 5 * 4 + 4 * 3 + 3);  // d1 without its bias
}

// Keras 2's CuDNNLSTM and CuDNNGRU are the LSTM (tanh, sigmoid) and the GRU with reset_after.
TEST(ModelLoaderTest, CuDnnRecurrentLayersAreTheLayersTheyEqual) {
  for (const char* cls : {"CuDNNLSTM", "CuDNNGRU"}) {
    SCOPED_TRACE(cls);
    json rnn = {{"class_name", cls},
                {"config",
                 {{"name", "rnn"},
                  {"units", 6},
                  {"return_sequences", false},
                  {"return_state", false},
                  {"go_backwards", false},
                  {"stateful", false},
                  {"batch_input_shape", {nullptr, 7, 3}},
                  {"kernel_initializer", {{"class_name", "GlorotUniform"}, {"config", {}}}},
                  {"recurrent_initializer", {{"class_name", "Orthogonal"}, {"config", {}}}},
                  {"bias_initializer", {{"class_name", "Zeros"}, {"config", {}}}},
                  {"unit_forget_bias", true},
                  {"kernel_regularizer", nullptr},
                  {"recurrent_regularizer", nullptr},
                  {"bias_regularizer", nullptr},
                  {"activity_regularizer", nullptr},
                  {"kernel_constraint", nullptr},
                  {"recurrent_constraint", nullptr},
                  {"bias_constraint", nullptr}}}};
    if (std::string(cls) == "CuDNNGRU") rnn["config"].erase("unit_forget_bias");
    json doc = {{"class_name", "Sequential"},
                {"keras_version", "2.2.4"},
                {"config", {{"name", "s"}, {"layers", {rnn}}}}};
    auto m = LoadKerasModel(doc);
    ASSERT_TRUE(m.ok()) << m.status();
    const bool lstm = std::string(cls) == "CuDNNLSTM";
    // LSTM: 4 gates, one bias; GRU with reset_after: 3 gates, an input and a recurrent bias.
    EXPECT_EQ(m->graph->NumParams(), lstm ? 4 * 6 * (3 + 6 + 1) : 3 * 6 * (3 + 6 + 2));
    EXPECT_EQ(m->graph->layers()[0]->class_name(), lstm ? "LSTM" : "GRU");
  }
}

TEST(ModelLoaderTest, FilesThatCannotBeBuiltAreNamedNotAborted) {
  // A truncated file: where the JSON ends.
  testing::TempDir dir("model_loader_bad_files");
  const std::string path = dir.Path("cut.json");
  std::ofstream(path) << "{\"class_name\": \"Sequential\",\n \"config\": {\"name\": \"s\", \"lay";
  absl::Status s = LoadKerasModelFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not JSON at line 2, column"), std::string::npos) << s;
  // A weight larger than memory: the layer, the bytes needed and those available.
  for (int64_t units : {int64_t{1} << 31, int64_t{1000000000000}}) {
    json big = Dense("huge", units, "relu");
    big["config"]["batch_input_shape"] = {nullptr, 8};
    s = LoadKerasModel(
            {{"class_name", "Sequential"}, {"config", {{"name", "s"}, {"layers", {big}}}}})
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << units;
    EXPECT_NE(s.message().find("layer 'huge' (Dense): a weight of shape [8, " +
                               std::to_string(units) + "] needs"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find("available"), std::string::npos) << s;
  }
  // An axis of size 0.
  json zero = Dense("d", 3, "relu");
  zero["config"]["batch_input_shape"] = {nullptr, 0};
  s = LoadKerasModel(
          {{"class_name", "Sequential"}, {"config", {{"name", "s"}, {"layers", {zero}}}}})
          .status();
  EXPECT_NE(s.message().find("layer 'd' declares the input shape [null,0], with an axis of size 0"),
            std::string::npos)
      << s;
}

TEST(ModelLoaderTest, RefusalsNameTheLayerTheClassAndTheOption) {
  json first = Dense("d1", 4);
  first["config"]["batch_input_shape"] = {nullptr, 5};
  first["config"]["kernel_constraint"] = {{"class_name", "MaxNorm"},
                                          {"config", {{"max_value", 2}}}};
  auto m = LoadKerasModel({{"class_name", "Sequential"}, {"config", json::array({first})}});
  EXPECT_EQ(m.status().message(),
            "layer 'd1' (Dense): option kernel_constraint={\"class_name\":\"MaxNorm\",\"config\":"
            "{\"max_value\":2}} is not supported");
  json lam = {{"class_name", "Lambda"}, {"config", {{"name", "fn"}, {"function", "..."}}}};
  json seq = {{"class_name", "Sequential"}, {"config", json::array({first, lam})}};
  seq["config"][0]["config"].erase("kernel_constraint");
  auto l = LoadKerasModel(seq);
  EXPECT_NE(l.status().message().find("layer 'fn' (Lambda)"), std::string::npos) << l.status();
  EXPECT_NE(LoadKerasModel(json{{"class_name", "Dense"}}).status().message().find("not a model"),
            std::string::npos);
  EXPECT_EQ(LoadKerasModelFile("/nonexistent/model.json").status().code(),
            absl::StatusCode::kNotFound);
}

// A .keras archive (Keras 3's zip of config.json, metadata.json and the weights).
void WriteZip(const std::string& path, const std::map<std::string, std::string>& entries) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  ASSERT_NE(z, nullptr);
  for (const auto& [name, text] : entries) {
    zip_source_t* src = zip_source_buffer(z, text.data(), text.size(), 0);
    ASSERT_GE(zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE), 0);
  }
  ASSERT_EQ(zip_close(z), 0);
}

TEST(ModelLoaderTest, ReadsTheConfigOfAKerasArchive) {
  json first = Dense("d1", 4, "relu");
  first["config"]["batch_input_shape"] = {nullptr, 5};
  const std::string config = json{
      {"module", "keras"},
      {"class_name", "Sequential"},
      {"config", {{"name", "s"}, {"layers", {first, Dense("d2", 3)}}}},
      {"compile_config",
       {{"loss", "mse"}}}}.dump();
  const std::string path = ::testing::TempDir() + "/model.keras";
  WriteZip(path, {{"config.json", config}, {"metadata.json", R"({"keras_version": "3.5.0"})"}});
  auto m = LoadKerasModelFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph->NumParams(), 5 * 4 + 4 + 4 * 3 + 3);
  EXPECT_EQ(m->training_config["loss"], "mse");
  WriteZip(path, {{"metadata.json", "{}"}});
  EXPECT_NE(LoadKerasModelFile(path).status().message().find("without a readable config.json"),
            std::string::npos);
  std::remove(path.c_str());
}

TEST(ModelLoaderTest, ARecurrentLayersStatesCarryNoMask) {
  auto input = json{{"class_name", "InputLayer"},
                    {"name", "ids"},
                    {"config", {{"batch_input_shape", {nullptr, 5}}, {"name", "ids"}}},
                    {"inbound_nodes", json::array()}};
  json emb = {
      {"class_name", "Embedding"},
      {"name", "emb"},
      {"config", {{"name", "emb"}, {"input_dim", 10}, {"output_dim", 3}, {"mask_zero", true}}},
      {"inbound_nodes", {{{"ids", 0, 0, json::object()}}}}};
  json lstm = {
      {"class_name", "LSTM"},
      {"name", "lstm"},
      {"config",
       {{"name", "lstm"}, {"units", 2}, {"return_sequences", true}, {"return_state", true}}},
      {"inbound_nodes", {{{"emb", 0, 0, json::object()}}}}};
  json doc = {{"class_name", "Functional"},
              {"config",
               {{"name", "m"},
                {"layers", {input, emb, lstm}},
                {"input_layers", {{"ids", 0, 0}}},
                {"output_layers", {{"lstm", 0, 0}, {"lstm", 0, 1}, {"lstm", 0, 2}}}}}};
  auto m = LoadKerasModel(doc);
  ASSERT_TRUE(m.ok()) << m.status();
  Tensor ids({1, 5}, {3, 4, 0, 0, 0});
  m->graph->Forward({&ids}, graph::CallContext{});
  ASSERT_NE(m->graph->output_mask(0), nullptr);  // the sequence keeps the padding mask
  EXPECT_EQ(*m->graph->output_mask(0), Tensor({1, 5}, {1, 1, 0, 0, 0}));
  EXPECT_EQ(m->graph->output_mask(1), nullptr);  // h
  EXPECT_EQ(m->graph->output_mask(2), nullptr);  // c
}

TEST(ModelLoaderTest, Keras2ExplicitTrainingArgumentFixesTheCallsMode) {
  auto input = json{{"class_name", "InputLayer"},
                    {"name", "x"},
                    {"config", {{"batch_input_shape", {nullptr, 100}}, {"name", "x"}}},
                    {"inbound_nodes", json::array()}};
  json drop = {{"class_name", "Dropout"},
               {"name", "mc"},
               {"config", {{"name", "mc"}, {"rate", 0.5}}},
               {"inbound_nodes", {{{"x", 0, 0, {{"training", true}}}}}}};
  json doc = {{"class_name", "Functional"},
              {"config",
               {{"name", "m"},
                {"layers", {input, drop}},
                {"input_layers", {{"x", 0, 0}}},
                {"output_layers", {{"mc", 0, 0}}}}}};
  auto m = LoadKerasModel(doc);
  ASSERT_TRUE(m.ok()) << m.status();
  Tensor x({1, 100}, 1.0f);
  std::mt19937_64 rng(1);
  m->graph->Forward({&x}, graph::CallContext{false, &rng});  // inference, yet it drops
  int zeros = 0;
  for (float v : m->graph->output(0).values()) zeros += v == 0.0f;
  EXPECT_GT(zeros, 20);
}

// A decoder's self-attention: Keras records use_causal_mask per call; position t must not see
// positions after it, and a layer called both ways is refused.
json CausalAttentionModel(bool second_call_causal) {
  auto input = json{{"class_name", "InputLayer"},
                    {"name", "x"},
                    {"config", {{"batch_input_shape", {nullptr, 4, 3}}, {"name", "x"}}},
                    {"inbound_nodes", json::array()}};
  json mha = {{"class_name", "MultiHeadAttention"},
              {"name", "att"},
              {"config", {{"name", "att"}, {"num_heads", 2}, {"key_dim", 2}}},
              {"inbound_nodes",
               {{{"x", 0, 0, {{"value", {"x", 0, 0}}, {"use_causal_mask", true}}}},
                {{"x", 0, 0, {{"value", {"x", 0, 0}}, {"use_causal_mask", second_call_causal}}}}}}};
  return {{"class_name", "Functional"},
          {"config",
           {{"name", "m"},
            {"layers", {input, mha}},
            {"input_layers", {{"x", 0, 0}}},
            {"output_layers", {{"att", 0, 0}, {"att", 1, 0}}}}}};
}

TEST(ModelLoaderTest, CausalSelfAttentionSeesOnlyEarlierPositions) {
  auto m = LoadKerasModel(CausalAttentionModel(true));
  ASSERT_TRUE(m.ok()) << m.status();
  Tensor x = graph::testing::RandomTensor({1, 4, 3}, 5);
  m->graph->Forward({&x}, graph::CallContext{});
  const Tensor before = m->graph->output(0);
  x[3 * 3 + 1] += 1.0f;  // change the last position only
  m->graph->Forward({&x}, graph::CallContext{});
  const Tensor after = m->graph->output(0);
  for (int64_t i = 0; i < 3 * 3; ++i) EXPECT_EQ(after[i], before[i]) << i;  // positions 0-2
  float moved = 0;
  for (int64_t i = 9; i < 12; ++i) moved += std::abs(after[i] - before[i]);
  EXPECT_GT(moved, 0.0f);

  auto mixed = LoadKerasModel(CausalAttentionModel(false));
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("layer 'att' (MultiHeadAttention): calls with and "
                                          "without use_causal_mask"),
            std::string::npos)
      << mixed.status();
}

}  // namespace
}  // namespace lockstep::trainer::keras
