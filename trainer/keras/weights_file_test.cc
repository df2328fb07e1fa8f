// Keras's weights files: the layout follows Keras's saving walk (paths written out by hand for
// models with every kind of sub-object), each format round-trips, h5py (an independent HDF5
// implementation's Python binding) reads what we write and writes what we read, and every
// mismatch is an error that names the file, the layer and the weight, with nothing loaded.
#include "trainer/keras/weights_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <set>

#include "trainer/tensor/random.h"
#include "trainer/testing/python_peer.h"
#include "trainer/testing/source_dir.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer::keras {
namespace {

using nlohmann::json;

const char kPeer[] = "trainer/keras/testdata/h5_peer.py";

using ::lockstep::trainer::testing::SourcePath;

KerasModel Load(const json& doc, uint64_t seed) {
  absl::StatusOr<KerasModel> m = LoadKerasModel(doc, {.seed = seed});
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

KerasModel LoadFile(const std::string& rel, uint64_t seed) {
  absl::StatusOr<KerasModel> m = LoadKerasModelFile(SourcePath(rel), {.seed = seed});
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

// Every weight drawn afresh, so no value is an initializer's constant (Normalization's example
// count stays a count).
void Randomize(KerasModel& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  UniformDraw<float> d(-2, 2);
  for (auto& [layer, w] : m.graph->AllWeights()) {
    for (float& v : w->value.values()) v = w->name == "count" ? 12.0f : d(rng);
  }
}

// Every weight's values but Normalization's count, which Keras 3's files do not keep.
std::vector<std::vector<float>> Values(KerasModel& m) {
  std::vector<std::vector<float>> out;
  for (auto& [layer, w] : m.graph->AllWeights()) {
    if (w->name != "count") out.push_back(w->value.values());
  }
  return out;
}

float Count(KerasModel& m) {
  for (auto& [layer, w] : m.graph->AllWeights()) {
    if (w->name == "count") return w->value[0];
  }
  return -1;
}

json Sequential() {
  // A Sequential model with an InputLayer, weights of both kinds, a nested Sequential model and
  // a Normalization layer (whose count Keras 3 does not keep).
  return json::parse(R"({"class_name": "Sequential", "config": {"name": "seq", "layers": [
    {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 6], "name": "in"}},
    {"class_name": "Normalization", "config": {"name": "norm", "axis": -1}},
    {"class_name": "Dense", "config": {"name": "d0", "units": 5}},
    {"class_name": "BatchNormalization", "config": {"name": "bn"}},
    {"class_name": "Sequential", "config": {"name": "inner", "layers": [
      {"class_name": "Dense", "config": {"name": "d1", "units": 4}},
      {"class_name": "BatchNormalization", "config": {"name": "bn1"}},
      {"class_name": "Dropout", "config": {"name": "drop", "rate": 0.1}}]}},
    {"class_name": "Dense", "config": {"name": "out", "units": 3, "activation": "softmax"}}]}})");
}

std::set<std::string> Keras3Paths(const WeightLayout& l) {
  std::set<std::string> out;
  for (const KerasVariable& v : l.variables) {
    if (!v.keras3_path.empty()) out.insert(v.keras3_path);
  }
  return out;
}

TEST(KerasWeightsLayoutTest, SequentialFollowsKerasWalk) {
  KerasModel m = Load(Sequential(), 1);
  absl::StatusOr<WeightLayout> l = LayoutOf(m);
  ASSERT_TRUE(l.ok()) << l.status();
  // Keras 3: layers numbered per class in the model's order; the nested model's under its own
  // "layers"; no InputLayer in a Sequential model's layers; Normalization's count not kept.
  EXPECT_EQ(Keras3Paths(*l), (std::set<std::string>{
                                 "layers/normalization/vars/0",
                                 "layers/normalization/vars/1",
                                 "layers/dense/vars/0",
                                 "layers/dense/vars/1",
                                 "layers/batch_normalization/vars/0",
                                 "layers/batch_normalization/vars/1",
                                 "layers/batch_normalization/vars/2",
                                 "layers/batch_normalization/vars/3",
                                 "layers/sequential/layers/dense/vars/0",
                                 "layers/sequential/layers/dense/vars/1",
                                 "layers/sequential/layers/batch_normalization/vars/0",
                                 "layers/sequential/layers/batch_normalization/vars/1",
                                 "layers/sequential/layers/batch_normalization/vars/2",
                                 "layers/sequential/layers/batch_normalization/vars/3",
                                 "layers/dense_1/vars/0",
                                 "layers/dense_1/vars/1",
                             }));
  std::set<std::string> objects;
  for (const auto& [path, name] : l->keras3_objects) objects.insert(path + "=" + name);
  EXPECT_TRUE(objects.count("=seq"));
  EXPECT_TRUE(objects.count("layers/sequential/layers/dropout=drop"));
  EXPECT_FALSE(objects.count("layers/input_layer=in"));

  // Keras 2: the model's layers; the nested model one group of all its weights, trainable
  // first; a layer's own names under it.
  EXPECT_EQ(l->keras2_layers, (std::vector<std::string>{"norm", "d0", "bn", "inner", "out"}));
  std::map<std::string, std::vector<std::string>> groups;
  for (const KerasVariable& v : l->variables) groups[v.keras2_group].push_back(v.keras2_name);
  EXPECT_EQ(groups["bn"], (std::vector<std::string>{"bn/gamma:0", "bn/beta:0", "bn/moving_mean:0",
                                                    "bn/moving_variance:0"}));
  EXPECT_EQ(groups["norm"],
            (std::vector<std::string>{"norm/mean:0", "norm/variance:0", "norm/count:0"}));
  EXPECT_EQ(groups["inner"].size(), 6u);
  EXPECT_EQ(groups["inner"][0], "d1/kernel:0");
}

TEST(KerasWeightsLayoutTest, SubObjectsFollowTheirAttributes) {
  KerasModel m = LoadFile("trainer/model/testdata/recurrent.json", 1);
  absl::StatusOr<WeightLayout> l = LayoutOf(m);
  ASSERT_TRUE(l.ok()) << l.status();
  std::set<std::string> want;
  auto add = [&](const std::string& obj, int n) {
    for (int i = 0; i < n; ++i) want.insert(obj + "/vars/" + std::to_string(i));
  };
  add("layers/gru/cell", 3);
  add("layers/lstm/cell", 3);
  add("layers/bidirectional/forward_layer/cell", 3);
  add("layers/bidirectional/backward_layer/cell", 3);
  add("layers/bidirectional_1/forward_layer/cell", 3);
  add("layers/bidirectional_1/backward_layer/cell", 3);
  add("layers/time_distributed/layer", 2);
  add("layers/multi_head_attention/_query_dense", 2);
  add("layers/multi_head_attention/_key_dense", 2);
  add("layers/multi_head_attention/_value_dense", 2);
  add("layers/multi_head_attention/_output_dense", 2);
  add("layers/simple_rnn/cell", 3);
  add("layers/bidirectional_2/forward_layer/cell", 3);
  add("layers/bidirectional_2/backward_layer/cell", 3);
  add("layers/dense", 2);
  EXPECT_EQ(Keras3Paths(*l), want);
  // A functional model's InputLayer is one of its layers; layers without weights keep a group.
  std::set<std::string> objects;
  for (const auto& [path, name] : l->keras3_objects) objects.insert(path);
  EXPECT_TRUE(objects.count("layers/input_layer"));
  EXPECT_TRUE(objects.count("layers/add"));
  std::set<std::string> k2;
  for (const KerasVariable& v : l->variables) k2.insert(v.keras2_group + ":" + v.keras2_name);
  EXPECT_TRUE(k2.count("gru:gru/gru_cell/kernel:0"));
  EXPECT_TRUE(k2.count("attention:attention/query/kernel:0"));
  EXPECT_TRUE(k2.count("per_step:per_step/bias:0"));
  EXPECT_TRUE(k2.count("rnn:rnn/simple_rnn_cell/recurrent_kernel:0"));
}

class KerasWeightsFileTest : public ::testing::Test {
 protected:
  testing::TempDir dir_{"weights_file_test"};
  std::string Path(const std::string& name) { return dir_.Path(name); }
};

TEST_F(KerasWeightsFileTest, EachFormatRoundTrips) {
  for (const char* model : {"sequential", "trainer/model/testdata/recurrent.json",
                            "trainer/model/testdata/masked.json", "examples/models/cnn.json"}) {
    SCOPED_TRACE(model);
    auto load = [&](uint64_t seed) {
      return std::string(model) == "sequential" ? Load(Sequential(), seed) : LoadFile(model, seed);
    };
    KerasModel trained = load(1);
    Randomize(trained, 7);
    ASSERT_TRUE(WriteKeras3Weights(trained, Path("a.weights.h5")).ok());
    ASSERT_TRUE(WriteKeras2Weights(trained, Path("a.h5")).ok());
    ASSERT_TRUE(WriteKerasArchive(trained, Path("a.keras")).ok());
    for (const char* file : {"a.weights.h5", "a.h5", "a.keras"}) {
      SCOPED_TRACE(file);
      KerasModel fresh = load(2);
      ASSERT_NE(Values(fresh), Values(trained));
      absl::Status s = ReadKerasWeights(Path(file), &fresh);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(Values(fresh), Values(trained));
      KerasModel initial = load(2);
      EXPECT_EQ(Count(fresh), std::string(file) == "a.h5" ? Count(trained) : Count(initial));
    }
    // The archive's config is the model as loaded: the loader builds the same model from it.
    absl::StatusOr<KerasModel> again = LoadKerasModelFile(Path("a.keras"), {.seed = 3});
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_TRUE(ReadKerasWeights(Path("a.keras"), &*again).ok());
    EXPECT_EQ(Values(*again), Values(trained));
  }
}

TEST_F(KerasWeightsFileTest, H5pyReadsTheLayoutsAndValues) {
  KerasModel m = Load(Sequential(), 1);
  Randomize(m, 3);
  ASSERT_TRUE(WriteKerasArchive(m, Path("m.keras")).ok());
  ASSERT_TRUE(WriteKeras2Weights(m, Path("m.h5")).ok());
  absl::StatusOr<json> archive = testing::RunPythonPeer(kPeer, {"dump", Path("m.keras")});
  if (absl::IsUnavailable(archive.status())) GTEST_SKIP() << archive.status();
  ASSERT_TRUE(archive.ok()) << archive.status();
  absl::StatusOr<WeightLayout> l = LayoutOf(m);
  ASSERT_TRUE(l.ok());

  EXPECT_EQ((*archive)["members"], json({"config.json", "metadata.json", "model.weights.h5"}));
  EXPECT_EQ((*archive)["config"], *m.config);
  EXPECT_TRUE((*archive)["metadata"].contains("keras_version"));
  const json& w3 = (*archive)["weights"];
  size_t seen = 0;
  for (const KerasVariable& v : l->variables) {
    if (v.keras3_path.empty()) continue;
    ASSERT_TRUE(w3["datasets"].contains(v.keras3_path)) << v.keras3_path;
    const json& d = w3["datasets"][v.keras3_path];
    EXPECT_EQ(d["dtype"], "float32");
    EXPECT_EQ(d["shape"].get<Shape>(), v.weight->value.shape());
    const auto values = d["values"].get<std::vector<double>>();
    ASSERT_EQ(values.size(), v.weight->value.values().size());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(static_cast<float>(values[i]), v.weight->value[static_cast<int64_t>(i)]);
    }
    ++seen;
  }
  EXPECT_EQ(w3["datasets"].size(), seen);
  EXPECT_EQ(w3["attrs"]["layers/dense/vars"]["name"], "d0");
  EXPECT_EQ(w3["attrs"]["vars"]["name"], "seq");

  absl::StatusOr<json> k2 = testing::RunPythonPeer(kPeer, {"dump", Path("m.h5")});
  ASSERT_TRUE(k2.ok()) << k2.status();
  EXPECT_EQ((*k2)["attrs"][""]["layer_names"], json(l->keras2_layers));
  EXPECT_EQ((*k2)["attrs"][""]["backend"], "tensorflow");
  EXPECT_EQ((*k2)["attrs"]["bn"]["weight_names"],
            json({"bn/gamma:0", "bn/beta:0", "bn/moving_mean:0", "bn/moving_variance:0"}));
  EXPECT_EQ((*k2)["datasets"]["norm/norm/count:0"]["dtype"], "int64");
  const json& kernel = (*k2)["datasets"]["out/out/kernel:0"];
  EXPECT_EQ(kernel["shape"], json({4, 3}));
}

// Files h5py writes as Keras does (variable-length name strings, NumPy byte-string lists) load.
TEST_F(KerasWeightsFileTest, ReadsWhatH5pyWritesInKerasLayouts) {
  KerasModel m = LoadFile("trainer/model/testdata/recurrent.json", 1);
  absl::StatusOr<WeightLayout> l = LayoutOf(m);
  ASSERT_TRUE(l.ok());
  std::mt19937_64 rng(9);
  UniformDraw<float> d(-1, 1);
  json spec = {{"layer_names", l->keras2_layers},
               {"layers", json::object()},
               {"objects", json::array()},
               {"vars", json::object()}};
  std::map<const graph::Weight*, std::vector<float>> want;
  for (const KerasVariable& v : l->variables) {
    std::vector<float> vals(v.weight->value.values().size());
    for (float& x : vals) x = d(rng);
    want[v.weight] = vals;
    spec["vars"][v.keras3_path] = {v.weight->value.shape(), vals};
  }
  for (const auto& [path, name] : l->keras3_objects) spec["objects"].push_back({path, name});
  for (const std::string& layer : l->keras2_layers) {
    json ws = json::array();
    // Keras 2's order: trainable first (everything here is).
    for (const KerasVariable& v : l->variables) {
      if (v.keras2_group == layer) {
        ws.push_back({v.keras2_name, v.weight->value.shape(), want[v.weight]});
      }
    }
    spec["layers"][layer] = ws;
  }
  std::ofstream(Path("spec.json")) << spec.dump();
  for (const char* cmd : {"write-keras3", "write-keras2", "write-model-h5"}) {
    SCOPED_TRACE(cmd);
    const std::string out = Path(std::string(cmd) + ".h5");
    absl::StatusOr<json> r = testing::RunPythonPeer(kPeer, {cmd, Path("spec.json"), out});
    if (absl::IsUnavailable(r.status())) GTEST_SKIP() << r.status();
    ASSERT_TRUE(r.ok()) << r.status();
    KerasModel fresh = LoadFile("trainer/model/testdata/recurrent.json", 5);
    absl::Status s = ReadKerasWeights(out, &fresh);
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<WeightLayout> lf = LayoutOf(fresh);
    ASSERT_TRUE(lf.ok());
    ASSERT_EQ(lf->variables.size(), l->variables.size());
    for (size_t i = 0; i < l->variables.size(); ++i) {
      EXPECT_EQ(lf->variables[i].weight->value.values(), want[l->variables[i].weight])
          << l->variables[i].keras3_path;
    }
  }
}

TEST_F(KerasWeightsFileTest, MismatchesNameTheFileLayerAndWeightAndLoadNothing) {
  KerasModel m = Load(Sequential(), 1);
  ASSERT_TRUE(WriteKeras3Weights(m, Path("m.weights.h5")).ok());
  ASSERT_TRUE(WriteKeras2Weights(m, Path("m.h5")).ok());
  ASSERT_TRUE(WriteKerasArchive(m, Path("m.keras")).ok());

  // The same architecture but a wider last layer: every format refuses it by name.
  json wider = Sequential();
  wider["config"]["layers"][5]["config"]["units"] = 7;
  for (const char* file : {"m.weights.h5", "m.h5", "m.keras"}) {
    SCOPED_TRACE(file);
    KerasModel other = Load(wider, 2);
    const auto before = Values(other);
    absl::Status s = ReadKerasWeights(Path(file), &other);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(Path(file)), std::string::npos) << s;
    EXPECT_NE(s.message().find("layer 'out' weight 'kernel'"), std::string::npos) << s;
    EXPECT_NE(s.message().find("[4, 7]"), std::string::npos) << s;
    EXPECT_NE(s.message().find("[4, 3]"), std::string::npos) << s;
    EXPECT_EQ(Values(other), before) << "a refused file must load nothing";
  }

  // One layer fewer (Keras 2 loads by the order of the layers with weights): the counts named.
  json fewer = Sequential();
  fewer["config"]["layers"].erase(3);  // the BatchNormalization
  KerasModel small = Load(fewer, 2);
  absl::Status s = ReadKerasWeights(Path("m.h5"), &small);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the file has weights for 5 layer(s)"), std::string::npos) << s;
  // A layer with a variable fewer (Dense without its bias): both layouts name it.
  json no_bias = Sequential();
  no_bias["config"]["layers"][2]["config"]["use_bias"] = false;
  KerasModel nb = Load(no_bias, 2);
  s = ReadKerasWeights(Path("m.weights.h5"), &nb);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'d0' (layers/dense) has 2 variable(s) in the file, 1 in the model"),
            std::string::npos)
      << s;
  s = ReadKerasWeights(Path("m.h5"), &nb);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 'd0' has 1 weight(s) in the model, the file's 'd0'"),
            std::string::npos)
      << s;

  // Not a weights file at all, and no file.
  std::ofstream(Path("text.h5")) << "not hdf5";
  s = ReadKerasWeights(Path("text.h5"), &small);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("neither a .keras archive nor an HDF5"), std::string::npos) << s;
  EXPECT_EQ(ReadKerasWeights(Path("absent.h5"), &small).code(), absl::StatusCode::kNotFound);
}

TEST(KerasWeightsLayoutTest, SnakeCaseIsKeras) {
  // Each pair as Python's re.sub gives it for Keras's naming.to_snake_case.
  const std::pair<const char*, const char*> cases[] = {
      {"MultiHeadAttention", "multi_head_attention"},
      {"Conv2D", "conv2d"},
      {"LSTMCell", "lstm_cell"},
      {"ReLU", "re_lu"},
      {"GlobalAveragePooling2D", "global_average_pooling2d"},
      {"SimpleRNNCell", "simple_rnn_cell"},
      {"Conv2DTranspose", "conv2d_transpose"},
      {"UpSampling2D", "up_sampling2d"},
      {"PReLU", "p_re_lu"},
      {"LeakyReLU", "leaky_re_lu"},
      {"ELU", "elu"},
      {"AAaBbCc", "a_aa_bb_cc"},
      {"aBCdEf", "a_b_cd_ef"},
      {"Odd-Name!", "odd_name"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(KerasSnakeCase(in), want) << in;
}

TEST(KerasWeightsLayoutTest, LayerGroupsAreNamedInSnakeCase) {
  // Through the paths it makes: class names as Keras's to_snake_case writes them.
  KerasModel m = Load(json::parse(R"({"class_name": "Sequential", "config": {"name": "s",
    "layers": [{"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
                "batch_input_shape": [null, 5, 5, 1]}},
               {"class_name": "GlobalAveragePooling2D", "config": {"name": "g"}},
               {"class_name": "ReLU", "config": {"name": "r"}},
               {"class_name": "LayerNormalization", "config": {"name": "ln"}}]}})"),
                      1);
  absl::StatusOr<WeightLayout> l = LayoutOf(m);
  ASSERT_TRUE(l.ok()) << l.status();
  std::set<std::string> objects;
  for (const auto& [path, name] : l->keras3_objects) objects.insert(path);
  EXPECT_EQ(objects, (std::set<std::string>{"", "layers/conv2d", "layers/global_average_pooling2d",
                                            "layers/re_lu", "layers/layer_normalization"}));
}

}  // namespace
}  // namespace lockstep::trainer::keras
