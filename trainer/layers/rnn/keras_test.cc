// The recurrent layers' Keras factories on the real configs of the corpus, and the layers
// against PyTorch (trainer/graph/oracle/).
#include <gtest/gtest.h>

#include "trainer/graph/graph.h"
#include "trainer/graph/testing/forward.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/graph/testing/torch_oracle.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/rnn/rnn.h"

namespace lockstep::trainer::graph {
namespace {

using nlohmann::json;
using testing::WeightNames;

constexpr char kRecurrentOracle[] = "trainer/graph/oracle/recurrent_attention_oracle.py";

Weight* Find(Layer& l, const std::string& name) {
  for (Weight& w : l.weights()) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Layer>> FromKeras(const std::string& text, bool keras3) {
  return keras::LayerFactories::Get().Build(json::parse(text), keras3);
}

// Builds the layer for per-example input shapes and returns its output shapes.
std::vector<Shape> Shapes(Layer& l, const std::vector<Shape>& in) {
  std::mt19937_64 rng(1);
  absl::StatusOr<std::vector<Shape>> out = l.Build(in, BuildContext{&rng});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Shape>{};
}

// From 003-bilstm-timedistributed-pos.json (Keras 2.3.1).
constexpr char k003Embedding[] =
    R"({"class_name": "Embedding", "config": {"name": "embedding_1", "trainable": true, "batch_input_shape": [null, null], "dtype": "float32", "input_dim": 47238, "output_dim": 128, "embeddings_initializer": {"class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05, "seed": null}}, "embeddings_regularizer": null, "activity_regularizer": null, "embeddings_constraint": null, "mask_zero": false, "input_length": null}})";
constexpr char k003Bidirectional[] =
    R"({"class_name": "Bidirectional", "config": {"name": "bidirectional_1", "trainable": true, "dtype": "float32", "layer": {"class_name": "LSTM", "config": {"name": "lstm_1", "trainable": true, "dtype": "float32", "return_sequences": true, "return_state": false, "go_backwards": false, "stateful": false, "unroll": false, "units": 256, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": true, "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform", "seed": null}}, "recurrent_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "unit_forget_bias": true, "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null, "dropout": 0.0, "recurrent_dropout": 0.0, "implementation": 2}}, "merge_mode": "concat"}})";
constexpr char k003TimeDistributed[] =
    R"({"class_name": "TimeDistributed", "config": {"name": "time_distributed_1", "trainable": true, "dtype": "float32", "layer": {"class_name": "Dense", "config": {"name": "dense_1", "trainable": true, "dtype": "float32", "units": 27, "activation": "linear", "use_bias": true, "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform", "seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null}}}})";
// From 005-gru-timeseries.json (Keras 2.12).
constexpr char k005Gru[] =
    R"({"class_name": "GRU", "config": {"name": "gru_24", "trainable": true, "dtype": "float32", "batch_input_shape": [null, 12, 1], "return_sequences": true, "return_state": false, "go_backwards": false, "stateful": false, "unroll": false, "time_major": false, "units": 50, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": true, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}}, "recurrent_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null, "dropout": 0.0, "recurrent_dropout": 0.0, "implementation": 2, "reset_after": true}})";
// From 009-gru-batchnorm-weather.json (Keras 2.8): seeded initializers, L1L2 regularizers.
constexpr char k009Gru[] =
    R"({"class_name": "GRU", "config": {"name": "gru_4", "trainable": true, "dtype": "float32", "return_sequences": false, "return_state": false, "go_backwards": false, "stateful": false, "unroll": false, "time_major": false, "units": 1024, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": true, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": 50}}, "recurrent_initializer": {"class_name": "GlorotUniform", "config": {"seed": 51}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": {"class_name": "L1L2", "config": {"l1": 0.009999999776482582, "l2": 0.009999999776482582}}, "recurrent_regularizer": {"class_name": "L1L2", "config": {"l1": 0.009999999776482582, "l2": 0.009999999776482582}}, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null, "dropout": 0.0, "recurrent_dropout": 0.0, "implementation": 2, "reset_after": true}})";
// From 027-seq2seq-encoder-bilstm.json (Keras 2.1.6): hard_sigmoid, implementation 1.
constexpr char k027Embedding[] =
    R"({"class_name": "Embedding", "config": {"name": "embedding_1", "trainable": false, "batch_input_shape": [null, null], "dtype": "float32", "input_dim": 47832, "output_dim": 100, "embeddings_initializer": {"class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05, "seed": null}}, "embeddings_regularizer": null, "activity_regularizer": null, "embeddings_constraint": null, "mask_zero": false, "input_length": null}})";
constexpr char k027Bidirectional[] =
    R"({"class_name": "Bidirectional", "config": {"name": "bidirectional_1", "trainable": true, "layer": {"class_name": "LSTM", "config": {"name": "lstm_1", "trainable": true, "return_sequences": true, "return_state": false, "go_backwards": false, "stateful": false, "unroll": false, "units": 512, "activation": "tanh", "recurrent_activation": "hard_sigmoid", "use_bias": true, "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform", "seed": null}}, "recurrent_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "unit_forget_bias": true, "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null, "dropout": 0.0, "recurrent_dropout": 0.0, "implementation": 1}}, "merge_mode": "concat"}})";
constexpr char k027Lstm[] =
    R"({"class_name": "LSTM", "config": {"name": "lstm_2", "trainable": true, "return_sequences": false, "return_state": true, "go_backwards": false, "stateful": false, "unroll": false, "units": 256, "activation": "tanh", "recurrent_activation": "hard_sigmoid", "use_bias": true, "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform", "seed": null}}, "recurrent_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "unit_forget_bias": true, "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null, "dropout": 0.0, "recurrent_dropout": 0.0, "implementation": 1}})";
// From 029-functional-bilstm-k215.json (Keras 2.15: module and registered_name keys).
constexpr char k029Embedding[] =
    R"({"module": "keras.layers", "class_name": "Embedding", "config": {"name": "embedding_3", "trainable": true, "dtype": "float32", "batch_input_shape": [null, 50], "input_dim": 500, "output_dim": 64, "embeddings_initializer": {"module": "keras.initializers", "class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05, "seed": null}, "registered_name": null}, "embeddings_regularizer": null, "activity_regularizer": null, "embeddings_constraint": null, "mask_zero": false, "input_length": 50}, "registered_name": null})";
constexpr char k029Bidirectional[] =
    R"({"module": "keras.layers", "class_name": "Bidirectional", "config": {"name": "bidirectional_1", "trainable": true, "dtype": "float32", "layer": {"module": "keras.layers", "class_name": "LSTM", "config": {"name": "lstm_1", "trainable": true, "dtype": "float32", "return_sequences": false, "return_state": false, "go_backwards": false, "stateful": false, "unroll": false, "time_major": false, "units": 64, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": true, "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null}, "recurrent_initializer": {"module": "keras.initializers", "class_name": "Orthogonal", "config": {"gain": 1.0, "seed": null}, "registered_name": null}, "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null}, "unit_forget_bias": true, "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null, "dropout": 0.0, "recurrent_dropout": 0.0, "implementation": 2}, "registered_name": null}, "merge_mode": "concat"}, "registered_name": null})";
// From 039-k3-embedding-gap1d.json and 049-k3-captioning-functional.json (Keras 3).
constexpr char k039Embedding[] =
    R"({"module": "keras.layers", "class_name": "Embedding", "config": {"name": "embedding", "trainable": true, "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null}, "input_dim": 10000, "output_dim": 64, "embeddings_initializer": {"module": "keras.initializers", "class_name": "RandomUniform", "config": {"seed": null, "minval": -0.05, "maxval": 0.05}, "registered_name": null}, "embeddings_regularizer": null, "activity_regularizer": null, "embeddings_constraint": null, "mask_zero": false, "quantization_config": null}, "registered_name": null})";
constexpr char k049Embedding[] =
    R"({"module": "keras.layers", "class_name": "Embedding", "config": {"name": "embedding", "trainable": true, "dtype": "float32", "input_dim": 8485, "output_dim": 256, "embeddings_initializer": {"module": "keras.initializers", "class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05, "seed": null}, "registered_name": null}, "embeddings_regularizer": null, "activity_regularizer": null, "embeddings_constraint": null, "mask_zero": true}, "registered_name": null})";
constexpr char k049Lstm[] =
    R"({"module": "keras.layers", "class_name": "LSTM", "config": {"name": "lstm", "trainable": true, "dtype": "float32", "return_sequences": false, "return_state": false, "go_backwards": false, "stateful": false, "unroll": false, "zero_output_for_mask": false, "units": 256, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": true, "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null}, "recurrent_initializer": {"module": "keras.initializers", "class_name": "OrthogonalInitializer", "config": {"gain": 1.0, "seed": null}, "registered_name": null}, "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null}, "unit_forget_bias": true, "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null, "dropout": 0.0, "recurrent_dropout": 0.0, "seed": null}, "registered_name": null})";

TEST(RecurrentFactoryTest, BuildsTheCorpusConfigs) {
  auto emb = FromKeras(k003Embedding, false);
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(Shapes(**emb, {{-1}}), (std::vector<Shape>{{-1, 128}}));
  EXPECT_EQ((*emb)->weights()[0].value.shape(), Shape({47238, 128}));

  auto bi = FromKeras(k003Bidirectional, false);
  ASSERT_TRUE(bi.ok()) << bi.status();
  EXPECT_EQ((*bi)->class_name(), "Bidirectional");
  EXPECT_EQ(Shapes(**bi, {{-1, 128}}), (std::vector<Shape>{{-1, 512}}));
  EXPECT_EQ(WeightNames(**bi)[0], "forward_lstm_1/kernel");
  EXPECT_EQ(WeightNames(**bi)[3], "backward_lstm_1/kernel");
  EXPECT_EQ(Find(**bi, "backward_lstm_1/recurrent_kernel")->value.shape(), Shape({256, 1024}));

  auto td = FromKeras(k003TimeDistributed, false);
  ASSERT_TRUE(td.ok()) << td.status();
  EXPECT_EQ(Shapes(**td, {{-1, 512}}), (std::vector<Shape>{{-1, 27}}));
  EXPECT_EQ(WeightNames(**td), (std::vector<std::string>{"kernel", "bias"}));

  auto gru = FromKeras(k005Gru, false);
  ASSERT_TRUE(gru.ok()) << gru.status();
  EXPECT_EQ(Shapes(**gru, {{12, 1}}), (std::vector<Shape>{{12, 50}}));
  EXPECT_EQ((*gru)->weights()[2].value.shape(), Shape({2, 150}));

  auto big = FromKeras(k009Gru, false);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(Shapes(**big, {{24, 512}}), (std::vector<Shape>{{1024}}));
  EXPECT_FLOAT_EQ((*big)->weights()[0].l1, 0.01f);
  EXPECT_FLOAT_EQ((*big)->weights()[1].l2, 0.01f);
  EXPECT_EQ((*big)->weights()[2].l1, 0.0f);
  // Seeded initializers draw the same weights whatever the model's generator.
  auto again = FromKeras(k009Gru, false);
  std::mt19937_64 other(99);
  ASSERT_TRUE((*again)->Build({{24, 512}}, BuildContext{&other}).ok());
  EXPECT_EQ((*again)->weights()[0].value, (*big)->weights()[0].value);

  auto frozen = FromKeras(k027Embedding, false);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_FALSE((*frozen)->trainable());
  // 027's BiLSTM has 512 units; 64 here, since drawing two orthogonal [512, 2048] recurrent
  // kernels takes initializer.cc some 14 s.
  json j27 = json::parse(k027Bidirectional);
  j27["config"]["layer"]["config"]["units"] = 64;
  auto bi27 = keras::LayerFactories::Get().Build(j27, false);
  ASSERT_TRUE(bi27.ok()) << bi27.status();
  EXPECT_EQ(Shapes(**bi27, {{40, 100}}), (std::vector<Shape>{{40, 128}}));
  auto enc = FromKeras(k027Lstm, false);
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ(Shapes(**enc, {{40, 1024}}), (std::vector<Shape>{{256}, {256}, {256}}));

  auto e29 = FromKeras(k029Embedding, false);
  ASSERT_TRUE(e29.ok()) << e29.status();
  EXPECT_EQ(Shapes(**e29, {{50}}), (std::vector<Shape>{{50, 64}}));
  EXPECT_FALSE((*FromKeras(k029Embedding, false))->Build({{40}}, {}).ok());  // input_length 50
  auto bi29 = FromKeras(k029Bidirectional, false);
  ASSERT_TRUE(bi29.ok()) << bi29.status();
  EXPECT_EQ(Shapes(**bi29, {{50, 64}}), (std::vector<Shape>{{128}}));

  auto e39 = FromKeras(k039Embedding, true);
  ASSERT_TRUE(e39.ok()) << e39.status();
  auto e49 = FromKeras(k049Embedding, true);
  ASSERT_TRUE(e49.ok()) << e49.status();
  auto l49 = FromKeras(k049Lstm, true);
  ASSERT_TRUE(l49.ok()) << l49.status();
  EXPECT_EQ(Shapes(**l49, {{34, 256}}), (std::vector<Shape>{{256}}));
  // Keras 3's OrthogonalInitializer: orthonormal rows of the recurrent kernel [256, 1024].
  const Tensor& rk = (*l49)->weights()[1].value;
  double dot = 0, norm = 0;
  for (int64_t k = 0; k < 1024; ++k) {
    dot += static_cast<double>(rk[k]) * rk[1024 + k];
    norm += static_cast<double>(rk[k]) * rk[k];
  }
  EXPECT_NEAR(norm, 1.0, 1e-4);
  EXPECT_NEAR(dot, 0.0, 1e-4);
}

// Keras's generic RNN around a built-in cell is the layer of that cell: RNN(LSTMCell) with the
// same options and seeds computes what LSTM computes; stacks of cells, other cells and unread
// options are refused by name.
TEST(RecurrentFactoryTest, GenericRnnOfABuiltInCellIsThatLayer) {
  const std::string cell_opts =
      R"("units": 5, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": true,
         "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": 3}},
         "recurrent_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": 4}},
         "bias_initializer": {"class_name": "Zeros", "config": {}}, "unit_forget_bias": true,
         "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null,
         "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null,
         "dropout": 0.0, "recurrent_dropout": 0.0)";
  const std::string rnn =
      R"({"class_name": "RNN", "config": {"name": "rnn", "trainable": true, "dtype": "float32",
         "return_sequences": true, "return_state": false, "go_backwards": true, "stateful": false,
         "unroll": false, "zero_output_for_mask": false,
         "cell": {"class_name": "LSTMCell", "config": {"name": "lstm_cell", "trainable": true,
                  "dtype": "float32", )" +
      cell_opts + "}}}}";
  const std::string lstm =
      R"({"class_name": "LSTM", "config": {"name": "rnn", "return_sequences": true,
         "go_backwards": true, )" +
      cell_opts + "}}";
  auto a = FromKeras(rnn, true);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = FromKeras(lstm, true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->class_name(), "LSTM");
  EXPECT_EQ(Shapes(**a, {{7, 3}}), (std::vector<Shape>{{7, 5}}));
  EXPECT_EQ(Shapes(**b, {{7, 3}}), (std::vector<Shape>{{7, 5}}));
  for (size_t w = 0; w < 3; ++w) EXPECT_EQ((*a)->weights()[w].value, (*b)->weights()[w].value);
  const Tensor x = testing::RandomTensor({2, 7, 3}, 9);
  std::vector<Tensor> ya(1), yb(1);
  Saved sa, sb;
  (*a)->Forward(Args{{&x}, {nullptr}}, &ya, &sa, CallContext{});
  (*b)->Forward(Args{{&x}, {nullptr}}, &yb, &sb, CallContext{});
  EXPECT_EQ(ya[0], yb[0]);

  auto stacked = FromKeras(
      R"({"class_name": "RNN", "config": {"name": "s", "cell": [{"class_name": "LSTMCell",
         "config": {"units": 2}}, {"class_name": "LSTMCell", "config": {"units": 2}}]}})",
      true);
  ASSERT_FALSE(stacked.ok());
  EXPECT_NE(stacked.status().message().find("layer 's' (RNN): a stack of cells"), std::string::npos)
      << stacked.status();
  auto custom = FromKeras(
      R"({"class_name": "RNN", "config": {"name": "c", "cell": {"class_name": "MinimalRNNCell",
         "config": {"units": 2}}}})",
      true);
  ASSERT_FALSE(custom.ok());
  EXPECT_NE(custom.status().message().find("cell class 'MinimalRNNCell' is not supported"),
            std::string::npos)
      << custom.status();
  auto unread = FromKeras(
      R"({"class_name": "RNN", "config": {"name": "u", "stateful": true,
         "cell": {"class_name": "GRUCell", "config": {"units": 2}}}})",
      true);
  ASSERT_FALSE(unread.ok());
  EXPECT_NE(unread.status().message().find("stateful"), std::string::npos) << unread.status();
}

TEST(RecurrentFactoryTest, TheCorpusEmbeddingMasksTheCorpusLstm) {
  // 049's captioning decoder: Embedding(mask_zero) -> LSTM, as a graph.
  Graph g;
  std::mt19937_64 rng(1);
  BuildContext ctx{&rng};
  const int ids = g.AddInput("ids", {34});
  const int e = (*g.Call(g.AddLayer(*FromKeras(k049Embedding, true)), {ids}, ctx))[0];
  const int h = (*g.Call(g.AddLayer(*FromKeras(k049Lstm, true)), {e}, ctx))[0];
  g.SetOutputs({h});
  Tensor x({2, 34});
  for (int64_t t = 0; t < 10; ++t) x[t] = x[34 + t] = static_cast<float>(t + 1);
  x[34 + 10] = 11;  // one more word in the second sequence
  std::mt19937_64 r(1);
  g.Forward({&x}, CallContext{false, &r});
  const Tensor y = g.output(0);
  Tensor cut = x;
  cut[34 + 10] = 0;
  g.Forward({&cut}, CallContext{false, &r});
  for (int64_t j = 0; j < 256; ++j) {
    EXPECT_EQ(g.output(0)[j], y[j]);  // the first sequence is unchanged
  }
  EXPECT_NE(g.output(0)[256], y[256]);
}

TEST(RecurrentFactoryTest, RefusesWhatItDoesNotImplement) {
  auto with = [](const char* base, const std::string& key, const json& value) {
    json j = json::parse(base);
    j["config"][key] = value;
    return keras::LayerFactories::Get().Build(j, false).status();
  };
  EXPECT_EQ(with(k027Lstm, "stateful", true).message(),
            "layer 'lstm_2' (LSTM): option stateful=true is not supported");
  // Keras 2.1-2.2's GRU with implementation 2 also dropped out the state it carried.
  EXPECT_EQ(with(k005Gru, "recurrent_dropout", 0.2).message(),
            "layer 'gru_24' (GRU): option recurrent_dropout=0.2 with implementation=2 is not "
            "supported");
  EXPECT_TRUE(with(k027Lstm, "recurrent_dropout", 0.2).ok());
  json gru1 = json::parse(k005Gru);
  gru1["config"]["recurrent_dropout"] = 0.2;
  gru1["config"]["implementation"] = 1;  // what tf.keras writes under recurrent_dropout
  EXPECT_TRUE(keras::LayerFactories::Get().Build(gru1, false).ok());
  EXPECT_TRUE(keras::LayerFactories::Get().Build(json::parse(k005Gru), true).ok());
  EXPECT_EQ(with(k005Gru, "time_major", true).message(),
            "layer 'gru_24' (GRU): option time_major=true is not supported");
  EXPECT_EQ(with(k027Lstm, "kernel_constraint", json{{"class_name", "MaxNorm"}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(k003Embedding, "embeddings_constraint", json{{"class_name", "NonNeg"}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(k003Embedding, "sparse", true).message(),
            "layer 'embedding_1' (Embedding): option sparse=true is not supported");
  EXPECT_EQ(with(k027Lstm, "mystery", 1).message(),
            "layer 'lstm_2' (LSTM): option mystery=1 is not supported");
  // The inner layer's refusal names the inner layer.
  json bi = json::parse(k003Bidirectional);
  bi["config"]["layer"]["config"]["stateful"] = true;
  EXPECT_EQ(keras::LayerFactories::Get().Build(bi, false).status().message(),
            "layer 'forward_lstm_1' (LSTM): option stateful=true is not supported");
  json over = json::parse(k003Bidirectional);
  over["config"]["layer"] = json::parse(R"({"class_name": "Dense", "config": {"units": 3}})");
  EXPECT_FALSE(keras::LayerFactories::Get().Build(over, false).ok());
  json mm = json::parse(k003Bidirectional);
  mm["config"]["merge_mode"] = "max";
  EXPECT_FALSE(keras::LayerFactories::Get().Build(mm, false).ok());
  json td = json::parse(k003TimeDistributed);
  td["config"]["layer"]["config"]["kernel_constraint"] = json{{"class_name", "MaxNorm"}};
  EXPECT_FALSE(keras::LayerFactories::Get().Build(td, false).ok());
}

TEST(RecurrentFactoryTest, KerasDefaultsAndKeras3Bidirectional) {
  // A minimal Keras 3 GRU: reset_after and sigmoid by default; Keras 2: before, hard_sigmoid.
  const char* gru = R"({"class_name": "GRU", "config": {"name": "g", "units": 2}})";
  auto g3 = FromKeras(gru, true);
  ASSERT_TRUE(g3.ok()) << g3.status();
  Shapes(**g3, {{3, 4}});
  EXPECT_EQ((*g3)->weights()[2].value.shape(), Shape({2, 6}));
  auto g2 = FromKeras(gru, false);
  ASSERT_TRUE(g2.ok()) << g2.status();
  Shapes(**g2, {{3, 4}});
  EXPECT_EQ((*g2)->weights()[2].value.shape(), Shape({6}));
  // Keras 3 writes the forward layer (named forward_...) and the backward one.
  const char* bi3 = R"({"module": "keras.layers", "class_name": "Bidirectional", "config": {
      "name": "bidirectional", "trainable": true, "dtype": "float32", "merge_mode": null,
      "layer": {"module": "keras.layers", "class_name": "LSTM", "config": {"name": "forward_lstm",
        "units": 3, "return_sequences": true, "go_backwards": false, "zero_output_for_mask": true,
        "seed": null}, "registered_name": null},
      "backward_layer": {"module": "keras.layers", "class_name": "LSTM", "config": {
        "name": "backward_lstm", "units": 3, "return_sequences": true, "go_backwards": true,
        "zero_output_for_mask": true, "seed": null}, "registered_name": null}},
      "registered_name": null})";
  auto b3 = FromKeras(bi3, true);
  ASSERT_TRUE(b3.ok()) << b3.status();
  EXPECT_EQ(Shapes(**b3, {{5, 2}}), (std::vector<Shape>{{5, 3}, {5, 3}}));
  EXPECT_EQ(WeightNames(**b3)[0], "forward_lstm/kernel");
  EXPECT_EQ(WeightNames(**b3)[3], "backward_lstm/kernel");
  json same = json::parse(bi3);
  same["config"]["backward_layer"]["config"]["go_backwards"] = false;
  EXPECT_FALSE(keras::LayerFactories::Get().Build(same, true).ok());
}

// --- PyTorch ---------------------------------------------------------------------------------

// Builds the case's layer from its Keras config, loads its weights, and compares the outputs,
// the input gradients and the weight gradients with PyTorch's within 1e-4 (relative to
// max(1, |value|)).
void CompareWithTorch(const std::string& name) {
  absl::StatusOr<json> j = testing::RunTorchOracle(kRecurrentOracle, name);
  if (absl::IsUnavailable(j.status())) GTEST_SKIP() << j.status();
  ASSERT_TRUE(j.ok()) << j.status();
  auto layer = keras::LayerFactories::Get().Build((*j)["config"], (*j)["keras3"].get<bool>());
  ASSERT_TRUE(layer.ok()) << layer.status();
  Layer& l = **layer;
  std::vector<Tensor> x, masks;
  std::vector<const Tensor*> mask_ptrs;
  for (const json& t : (*j)["inputs"]) x.push_back(testing::TensorFromJson(t));
  for (const json& m : (*j)["masks"])
    masks.push_back(m.is_null() ? Tensor() : testing::TensorFromJson(m));
  for (size_t i = 0; i < masks.size(); ++i) {
    mask_ptrs.push_back((*j)["masks"][i].is_null() ? nullptr : &masks[i]);
  }
  std::vector<Shape> shapes;
  for (const Tensor& t : x) shapes.emplace_back(t.shape().begin() + 1, t.shape().end());
  std::mt19937_64 rng(1);
  ASSERT_TRUE(l.Build(shapes, BuildContext{&rng}).ok());
  for (Weight& w : l.weights()) {
    ASSERT_TRUE((*j)["weights"].contains(w.name)) << w.name;
    Tensor v = testing::TensorFromJson((*j)["weights"][w.name]);
    ASSERT_EQ(v.shape(), w.value.shape()) << w.name;
    w.value = v;
    w.grad.Fill(0.0f);
  }
  ASSERT_EQ(l.weights().size(), (*j)["weights"].size());
  Args a;
  for (size_t i = 0; i < x.size(); ++i) {
    a.x.push_back(&x[i]);
    a.mask.push_back(mask_ptrs[i]);
  }
  std::vector<Tensor> out((*j)["outputs"].size());
  Saved s;
  std::string error;
  l.Forward(a, &out, &s, CallContext{false, &rng, &error});
  EXPECT_EQ(error, "");
  std::vector<Tensor> proj;
  for (const json& r : (*j)["projections"]) proj.push_back(testing::TensorFromJson(r));
  std::vector<const Tensor*> dout;
  for (size_t k = 0; k < out.size(); ++k) {
    EXPECT_LT(testing::MaxRelativeError(out[k], testing::TensorFromJson((*j)["outputs"][k])), 1e-4)
        << name << " output " << k;
    dout.push_back(&proj[k]);
  }
  std::vector<bool> need;
  for (size_t i = 0; i < x.size(); ++i) need.push_back(l.Differentiable(i));
  std::vector<Tensor> din(x.size());
  l.Backward(a, out, dout, need, &din, &s);
  for (size_t i = 0; i < x.size(); ++i) {
    const json& g = (*j)["input_grads"][i];
    EXPECT_EQ(need[i], !g.is_null()) << name << " input " << i;
    if (!need[i] || g.is_null()) continue;
    EXPECT_LT(testing::MaxRelativeError(din[i], testing::TensorFromJson(g)), 1e-4)
        << name << " input gradient " << i;
  }
  for (Weight& w : l.weights()) {
    EXPECT_LT(
        testing::MaxRelativeError(w.grad, testing::TensorFromJson((*j)["weight_grads"][w.name])),
        1e-4)
        << name << " gradient of " << w.name;
  }
  if (j->contains("output_mask")) {
    const Tensor* m = l.OutputMask(a, s);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(*m, testing::TensorFromJson((*j)["output_mask"]));
  }
}

TEST(RecurrentOracleTest, Lstm) { CompareWithTorch("lstm"); }
TEST(RecurrentOracleTest, LstmReturnSequences) { CompareWithTorch("lstm_return_sequences"); }
TEST(RecurrentOracleTest, GruResetAfter) { CompareWithTorch("gru_reset_after"); }
TEST(RecurrentOracleTest, GruResetBefore) { CompareWithTorch("gru_reset_before"); }
TEST(RecurrentOracleTest, SimpleRnn) { CompareWithTorch("simple_rnn"); }
TEST(RecurrentOracleTest, BidirectionalLstmConcat) {
  CompareWithTorch("bidirectional_lstm_concat");
}
TEST(RecurrentOracleTest, Embedding) { CompareWithTorch("embedding"); }

}  // namespace
}  // namespace lockstep::trainer::graph
