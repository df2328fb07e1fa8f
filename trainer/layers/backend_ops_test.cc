// Every registered layer on every backend present (ctest label gpu: its GPU columns skip
// themselves where no GPU is visible or the build has no CUDA). One table holds a row per Keras
// class the registry builds — a class without a row fails the test, so a new layer cannot come
// in untested here — with a config and the example shape of each input:
//   - CPU: the layer's backward pass against central finite differences of its forward pass
//     (graph/testing/gradcheck.h), for its inputs and weights, in training mode;
//   - each other backend (the GPU, in fp32, bf16 and fp16): a model that calls the layer on
//     Dense projections of one input (so its input gradient is exercised too) and ends in a
//     softmax head, run by the graph's executor over that backend, against the same model on
//     the CPU (model/testing/device_compare.h): loss, every gradient, the moving statistics.
//     A layer the backend lacks must be refused through the registry, naming the layer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/keras/model_loader.h"
#include "trainer/kernels/cuda/gpu_available.h"
#include "trainer/layers/registry.h"
#include "trainer/model/gpu_support.h"
#include "trainer/model/graph_model.h"

#ifdef LOCKSTEP_HAVE_CUDA
#include "trainer/model/device_graph.h"
#include "trainer/model/testing/device_compare.h"
#endif

namespace lockstep::trainer::layers {
namespace {

using json = nlohmann::json;

// One layer call: its class and config, each input's example shape (batch dropped), and the
// ids its (only) input holds (an Embedding's table size; 0: values).
struct Row {
  std::string cls;
  json config;
  std::vector<Shape> inputs;
  int64_t ids = 0;
};

std::vector<Row> Table() {
  const json rnn3 = {{"units", 3}};
  std::vector<Row> rows = {
      {"Dense", {{"units", 5}, {"activation", "tanh"}}, {{6}}},
      {"Activation", {{"activation", "swish"}}, {{6}}},
      {"ReLU", {{"max_value", 0.6}}, {{6}}},
      {"LeakyReLU", {{"alpha", 0.2}}, {{6}}},
      {"ELU", {{"alpha", 0.7}}, {{6}}},
      {"Softmax", {{"axis", -1}}, {{3, 4}}},
      {"PReLU", json::object(), {{3, 4}}},
      {"Embedding", {{"input_dim", 20}, {"output_dim", 4}}, {{5}}, 20},
      {"Dropout", {{"rate", 0.3}}, {{6}}},
      {"GaussianNoise", {{"stddev", 0.2}}, {{6}}},
      {"Masking", {{"mask_value", 0.0}}, {{5, 3}}},
      {"Flatten", json::object(), {{3, 4}}},
      {"Reshape", {{"target_shape", {4, 3}}}, {{3, 4}}},
      {"RepeatVector", {{"n", 3}}, {{4}}},
      {"BatchNormalization", json::object(), {{3, 4}}},
      {"LayerNormalization", json::object(), {{3, 4}}},
      {"Rescaling", {{"scale", 0.5}, {"offset", 0.1}}, {{6}}},
      {"Normalization",
       {{"axis", -1}, {"mean", {0.1, -0.2, 0.3}}, {"variance", {1.5, 0.5, 2.0}}},
       {{4, 3}}},
      {"SimpleRNN", rnn3, {{5, 4}}},
      {"LSTM", rnn3, {{5, 4}}},
      {"GRU", rnn3, {{5, 4}}},
      {"RNN", {{"cell", {{"class_name", "LSTMCell"}, {"config", rnn3}}}}, {{5, 4}}},
      {"Bidirectional",
       {{"layer", {{"class_name", "GRU"}, {"config", rnn3}}}, {"merge_mode", "concat"}},
       {{5, 4}}},
      {"TimeDistributed",
       {{"layer", {{"class_name", "Dense"}, {"config", {{"units", 3}}}}}},
       {{5, 4}}},
      {"MultiHeadAttention", {{"num_heads", 2}, {"key_dim", 3}}, {{5, 4}, {5, 4}}},
      {"Concatenate", {{"axis", -1}}, {{3, 4}, {3, 4}}},
      {"Conv1D", {{"filters", 3}, {"kernel_size", 3}}, {{8, 2}}},
      {"Conv2D", {{"filters", 3}, {"kernel_size", {3, 3}}, {"padding", "same"}}, {{6, 6, 2}}},
      {"Conv3D", {{"filters", 3}, {"kernel_size", {2, 2, 2}}}, {{4, 4, 4, 2}}},
      {"Conv1DTranspose", {{"filters", 3}, {"kernel_size", 3}, {"strides", 2}}, {{5, 2}}},
      {"Conv2DTranspose",
       {{"filters", 3}, {"kernel_size", {3, 3}}, {"strides", {2, 2}}},
       {{4, 4, 2}}},
      {"Conv3DTranspose",
       {{"filters", 2}, {"kernel_size", {2, 2, 2}}, {"strides", {2, 2, 2}}},
       {{3, 3, 3, 2}}},
      {"DepthwiseConv1D", {{"kernel_size", 3}}, {{8, 2}}},
      {"DepthwiseConv2D", {{"kernel_size", {3, 3}}}, {{6, 6, 2}}},
      {"SeparableConv1D", {{"filters", 3}, {"kernel_size", 3}}, {{8, 2}}},
      {"SeparableConv2D", {{"filters", 3}, {"kernel_size", {3, 3}}}, {{6, 6, 2}}},
      {"RandomFlip", {{"mode", "horizontal"}, {"seed", 5}}, {{6, 6, 2}}},
      {"RandomRotation", {{"factor", 0.1}, {"seed", 5}}, {{6, 6, 2}}},
  };
  for (const char* merge : {"Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum"}) {
    rows.push_back({merge, json::object(), {{3, 4}, {3, 4}}});
  }
  // The spatial families, at every rank: a 6-wide window per spatial axis, 2 channels.
  for (int rank : {1, 2, 3}) {
    const std::string d = std::to_string(rank) + "D";
    Shape in(static_cast<size_t>(rank), 4);
    in.push_back(2);
    const json window = rank == 1 ? json(2) : json(std::vector<int>(static_cast<size_t>(rank), 2));
    rows.push_back({"MaxPooling" + d, {{"pool_size", window}}, {in}});
    rows.push_back({"AveragePooling" + d, {{"pool_size", window}}, {in}});
    rows.push_back({"GlobalMaxPooling" + d, json::object(), {in}});
    rows.push_back({"GlobalAveragePooling" + d, json::object(), {in}});
    rows.push_back({"ZeroPadding" + d, {{"padding", 1}}, {in}});
    rows.push_back({"Cropping" + d, {{"cropping", 1}}, {in}});
    rows.push_back({"UpSampling" + d, {{"size", window}}, {in}});
  }
  return rows;
}

TEST(BackendOpsTest, EveryRegisteredLayerHasARow) {
  std::set<std::string> rows;
  for (const Row& r : Table()) rows.insert(r.cls);
  std::vector<std::string> missing;
  for (const std::string& name : Registry::Get().keras().Names()) {
    if (rows.count(name) == 0) missing.push_back(name);
  }
  EXPECT_EQ(missing, std::vector<std::string>{})
      << "every registered Keras class needs a row in this table";
  for (const std::string& name : rows) {
    EXPECT_NE(Registry::Get().keras().Find(name), nullptr) << name << " is not registered";
  }
}

// The row's layer, built from its Keras config.
absl::StatusOr<std::unique_ptr<graph::Layer>> MakeLayer(const Row& r) {
  json config = r.config;
  config["name"] = "under_test";
  return Registry::Get().keras().Build({{"class_name", r.cls}, {"config", config}}, false);
}

TEST(BackendOpsTest, CpuBackwardMatchesFiniteDifferences) {
  for (const Row& r : Table()) {
    SCOPED_TRACE(r.cls);
    absl::StatusOr<std::unique_ptr<graph::Layer>> layer = MakeLayer(r);
    ASSERT_TRUE(layer.ok()) << layer.status();
    std::vector<Tensor> inputs;
    uint64_t seed = 11;
    for (const Shape& s : r.inputs) {
      Tensor x = graph::testing::RandomTensor(graph::Batched(3, s), seed++);
      if (r.ids > 0) {
        for (float& v : x.values()) v = std::floor((v + 1.0f) / 2.0f * static_cast<float>(r.ids));
      }
      inputs.push_back(std::move(x));
    }
    graph::testing::GradCheckOptions o;
    o.eps = 1e-3f;
    o.tolerance = 3e-2;
    EXPECT_EQ(graph::testing::CheckLayerGradients(**layer, inputs, o), "");
  }
}

// The row as a Keras 2 functional model: one input, a Dense projection per input of the layer
// (its last axis kept), the layer, then Flatten (for a rank above one) and a softmax head.
json ModelDocument(const Row& r) {
  auto node = [](const std::string& src) { return json::array({src, 0, 0, json::object()}); };
  auto entry = [](const std::string& cls, const std::string& name, json config, json inbound) {
    config["name"] = name;
    return json{
        {"class_name", cls}, {"name", name}, {"config", config}, {"inbound_nodes", inbound}};
  };
  Shape first = r.inputs[0];
  json batch_shape = json::array({nullptr});
  for (int64_t d : first) batch_shape.push_back(d);
  json layers = json::array();
  layers.push_back(entry("InputLayer", "in", {{"batch_input_shape", batch_shape}}, json::array()));
  json call = json::array();
  for (size_t k = 0; k < r.inputs.size(); ++k) {
    if (r.ids > 0) {
      call.push_back(node("in"));
      continue;
    }
    const std::string pre = "pre" + std::to_string(k);
    layers.push_back(entry("Dense", pre, {{"units", r.inputs[k].back()}},
                           json::array({json::array({node("in")})})));
    call.push_back(node(pre));
  }
  if (r.cls == "MultiHeadAttention") {  // Keras 2 passes the value as a keyword
    call = json::array({json::array({"pre0", 0, 0, {{"value", json::array({"pre1", 0, 0})}}})});
  }
  layers.push_back(entry(r.cls, "under_test", r.config, json::array({call})));
  layers.push_back(
      entry("Flatten", "flat", json::object(), json::array({json::array({node("under_test")})})));
  layers.push_back(entry("Dense", "head", {{"units", 3}, {"activation", "softmax"}},
                         json::array({json::array({node("flat")})})));
  return {{"class_name", "Functional"},
          {"config",
           {{"name", "row"},
            {"layers", layers},
            {"input_layers", json::array({json::array({"in", 0, 0})})},
            {"output_layers", json::array({json::array({"head", 0, 0})})}}}};
}

absl::StatusOr<std::unique_ptr<GraphModel>> RowModel(const Row& r, uint64_t seed) {
  absl::StatusOr<keras::KerasModel> k = keras::LoadKerasModel(ModelDocument(r));
  if (!k.ok()) return k.status();
  return GraphModel::FromKeras(std::move(*k), seed, "categorical_crossentropy");
}

TEST(BackendOpsTest, EveryRowBuildsAsAModel) {
  for (const Row& r : Table()) {
    SCOPED_TRACE(r.cls);
    absl::StatusOr<std::unique_ptr<GraphModel>> m = RowModel(r, 1);
    ASSERT_TRUE(m.ok()) << m.status();
    // A layer the GPU lacks is refused by name through the registry.
    absl::Status gpu = GpuSupported((*m)->graph());
    if (!gpu.ok()) {
      EXPECT_EQ(gpu.code(), absl::StatusCode::kFailedPrecondition) << gpu;
      EXPECT_NE(gpu.message().find("under_test"), std::string::npos) << gpu;
    }
  }
}

#ifdef LOCKSTEP_HAVE_CUDA

TEST(BackendOpsTest, GpuMatchesTheCpuInEveryDtype) {
  cuda::GpuCountResult n = cuda::GpuCount();
  if (n.count == 0) GTEST_SKIP() << n.why_none;
  absl::StatusOr<std::unique_ptr<cuda::GpuContext>> ctx =
      cuda::GpuContext::Create(0, {.tf32 = false});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const uint64_t seed = std::random_device{}();  // fresh data every run, printed on failure
  int compared = 0;
  for (const Row& r : Table()) {
    for (cuda::DType t : {cuda::DType::kF32, cuda::DType::kBF16, cuda::DType::kF16}) {
      SCOPED_TRACE(r.cls + " " + cuda::DTypeName(t) + " seed " + std::to_string(seed));
      absl::StatusOr<std::unique_ptr<GraphModel>> m = RowModel(r, 7);
      ASSERT_TRUE(m.ok()) << m.status();
      if (!GpuSupported((*m)->graph()).ok()) continue;  // refused by name (above)
      absl::StatusOr<std::unique_ptr<DeviceGraph>> dev = DeviceGraph::Create(ctx->get(), **m, t, 7);
      if (!dev.ok() && t != cuda::DType::kF32 && r.ids > 0) continue;  // ids: fp32 only
      ASSERT_TRUE(dev.ok()) << dev.status();
      testing::ExpectDeviceMatchesCpu(**m, **dev, t, seed);
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

#endif  // LOCKSTEP_HAVE_CUDA

}  // namespace
}  // namespace lockstep::trainer::layers
