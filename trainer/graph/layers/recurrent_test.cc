// The sequence layers against finite differences, hand-computed cases, Keras's masking rules,
// the real configs of the corpus, and PyTorch (trainer/graph/oracle/).
#include "trainer/graph/layers/recurrent.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/graph/graph.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/graph/testing/torch_oracle.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/merging/merging.h"

namespace lockstep::trainer::graph {
namespace {

using nlohmann::json;
using testing::CheckGraphGradients;
using testing::CheckLayerGradients;
using testing::GradCheckOptions;
using testing::RandomTensor;

constexpr char kRecurrentOracle[] = "trainer/graph/oracle/recurrent_attention_oracle.py";

// Builds `l` for the inputs' shapes and runs one forward call.
struct RnnCall {
  std::vector<Tensor> out;
  Saved saved;
  std::string error;
};
RnnCall RunLayer(Layer& l, const std::vector<Tensor>& x, std::vector<const Tensor*> masks = {},
                 bool training = false, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<Shape> shapes;
  for (const Tensor& t : x) shapes.emplace_back(t.shape().begin() + 1, t.shape().end());
  absl::StatusOr<std::vector<Shape>> built = l.Build(shapes, BuildContext{&rng});
  EXPECT_TRUE(built.ok()) << built.status();
  RnnCall c;
  if (!built.ok()) return c;
  c.out.resize(built->size());
  Args a;
  for (size_t i = 0; i < x.size(); ++i) {
    a.x.push_back(&x[i]);
    a.mask.push_back(i < masks.size() ? masks[i] : nullptr);
  }
  l.Forward(a, &c.out, &c.saved, CallContext{training, &rng, &c.error});
  return c;
}

Weight* Find(Layer& l, const std::string& name) {
  for (Weight& w : l.weights()) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

std::vector<std::string> Names(const Layer& l) {
  std::vector<std::string> out;
  for (const Weight& w : l.weights()) out.push_back(w.name);
  return out;
}

std::vector<float> Values(const Tensor& t) { return t.values(); }

RnnOptions RnnUnits(int64_t u) {
  RnnOptions o;
  o.units = u;
  return o;
}

// A [batch, time] mask from each sequence's list of 0/1.
Tensor MaskOf(std::vector<std::vector<float>> rows) {
  const auto b = static_cast<int64_t>(rows.size());
  const auto t = static_cast<int64_t>(rows[0].size());
  std::vector<float> v;
  for (const auto& r : rows) v.insert(v.end(), r.begin(), r.end());
  return Tensor({b, t}, v);
}

// A one-unit SimpleRNN with linear activation: h = 2 x + 1 + 0.5 h'.
std::unique_ptr<Layer> TinyRnn(RnnOptions o) {
  o.units = 1;
  o.activation = Activation{Act::kLinear, 0};
  auto l = MakeRnn("rnn", RnnCell::kSimpleRnn, o);
  std::mt19937_64 rng(1);
  EXPECT_TRUE(l->Build({{3, 1}}, BuildContext{&rng}).ok());
  l->weights()[0].value = Tensor({1, 1}, 2.0f);
  l->weights()[1].value = Tensor({1, 1}, 0.5f);
  l->weights()[2].value = Tensor({1}, 1.0f);
  return l;
}

const Tensor kSeq({1, 3, 1}, {1, 2, 3});

// --- Hand-computed cases and Keras's rules --------------------------------------------------

TEST(RecurrentTest, SimpleRnnStepsByHand) {
  RnnOptions o;
  o.return_sequences = true;
  auto l = TinyRnn(o);
  // h1 = 2 + 1 = 3, h2 = 4 + 1 + 1.5 = 6.5, h3 = 6 + 1 + 3.25 = 10.25.
  EXPECT_EQ(Values(RunLayer(*l, {kSeq}).out[0]), (std::vector<float>{3, 6.5f, 10.25f}));
  o.go_backwards = true;  // reads 3, 2, 1 and returns the outputs in that order
  EXPECT_EQ(Values(RunLayer(*TinyRnn(o), {kSeq}).out[0]), (std::vector<float>{7, 8.5f, 7.25f}));
}

TEST(RecurrentTest, MaskedStepsCarryStateAndRepeatTheOutput) {
  RnnOptions o;
  o.return_sequences = true;
  o.return_state = true;
  Tensor mid = MaskOf({{1, 0, 1}});
  RnnCall c = RunLayer(*TinyRnn(o), {kSeq}, {&mid});
  EXPECT_EQ(Values(c.out[0]), (std::vector<float>{3, 3, 8.5f}));  // step 2 repeats step 1
  EXPECT_EQ(Values(c.out[1]), (std::vector<float>{8.5f}));
  o.zero_output_for_mask = true;
  EXPECT_EQ(Values(RunLayer(*TinyRnn(o), {kSeq}, {&mid}).out[0]), (std::vector<float>{3, 0, 8.5f}));
  // Leading masked steps: the initial state is carried, the output is zero until a step runs.
  o.zero_output_for_mask = false;
  Tensor pre = MaskOf({{0, 1, 1}});
  Tensor h0({1, 1}, 4.0f);
  c = RunLayer(*TinyRnn(o), {kSeq, h0}, {&pre, nullptr});
  EXPECT_EQ(Values(c.out[0]), (std::vector<float>{0, 7, 10.5f}));
  EXPECT_EQ(Values(c.out[1]), (std::vector<float>{10.5f}));
  // return_sequences=false: the last step that ran.
  RnnOptions last;
  Tensor post = MaskOf({{1, 1, 0}});
  EXPECT_EQ(Values(RunLayer(*TinyRnn(last), {kSeq}, {&post}).out[0]), (std::vector<float>{6.5f}));
  // The output mask is the input's for sequences, none otherwise.
  auto seq = TinyRnn(o);
  RnnCall sc = RunLayer(*seq, {kSeq}, {&mid});
  Args a{{&kSeq}, {&mid}};
  EXPECT_EQ(seq->OutputMask(a, sc.saved), &mid);
  auto one = TinyRnn(last);
  EXPECT_EQ(one->OutputMask(a, RunLayer(*one, {kSeq}, {&mid}).saved), nullptr);
}

TEST(RecurrentTest, LstmAndGruStepsByHand) {
  const float x = 0.5f, h0 = 0.3f, c0 = -0.2f;
  auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  // LSTM, one unit: kernel [1, 4] (i, f, c, o), recurrent [1, 4], bias [4].
  RnnOptions o = RnnUnits(1);
  o.return_state = true;
  auto lstm = MakeRnn("lstm", RnnCell::kLstm, o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(lstm->Build({{1, 1}, {1}, {1}}, BuildContext{&rng}).ok());
  lstm->weights()[0].value = Tensor({1, 4}, {1, 2, 3, 4});
  lstm->weights()[1].value = Tensor({1, 4}, {0.5f, -0.5f, 0.25f, 1});
  lstm->weights()[2].value = Tensor({4}, {0.1f, 0.2f, 0.3f, 0.4f});
  RnnCall c = RunLayer(*lstm, {Tensor({1, 1, 1}, x), Tensor({1, 1}, h0), Tensor({1, 1}, c0)});
  const float i = sig(x * 1 + h0 * 0.5f + 0.1f), f = sig(x * 2 - h0 * 0.5f + 0.2f);
  const float g = std::tanh(x * 3 + h0 * 0.25f + 0.3f), og = sig(x * 4 + h0 + 0.4f);
  const float cell = f * c0 + i * g;
  EXPECT_NEAR(c.out[0][0], og * std::tanh(cell), 1e-6);
  EXPECT_NEAR(c.out[1][0], og * std::tanh(cell), 1e-6);
  EXPECT_NEAR(c.out[2][0], cell, 1e-6);

  // GRU, one unit, kernel [1, 3] (z, r, h): the reset gate before or after the matmul.
  for (bool after : {true, false}) {
    RnnOptions go = RnnUnits(1);
    go.reset_after = after;
    auto gru = MakeRnn("gru", RnnCell::kGru, go);
    ASSERT_TRUE(gru->Build({{1, 1}, {1}}, BuildContext{&rng}).ok());
    gru->weights()[0].value = Tensor({1, 3}, {1, 2, 3});
    gru->weights()[1].value = Tensor({1, 3}, {0.5f, -0.5f, 0.75f});
    if (after) {
      ASSERT_EQ(gru->weights()[2].value.shape(), Shape({2, 3}));
      gru->weights()[2].value = Tensor({2, 3}, {0.1f, 0.2f, 0.3f, -0.1f, -0.2f, -0.3f});
    } else {
      ASSERT_EQ(gru->weights()[2].value.shape(), Shape({3}));
      gru->weights()[2].value = Tensor({3}, {0.1f, 0.2f, 0.3f});
    }
    RnnCall gc = RunLayer(*gru, {Tensor({1, 1, 1}, x), Tensor({1, 1}, h0)});
    const float z = sig(x + 0.1f + h0 * 0.5f + (after ? -0.1f : 0.0f));
    const float r = sig(2 * x + 0.2f - h0 * 0.5f + (after ? -0.2f : 0.0f));
    const float hh = after ? std::tanh(3 * x + 0.3f + r * (h0 * 0.75f - 0.3f))
                           : std::tanh(3 * x + 0.3f + (r * h0) * 0.75f);
    EXPECT_NEAR(gc.out[0][0], z * h0 + (1 - z) * hh, 1e-6) << after;
  }
}

TEST(RecurrentTest, LstmForgetBiasStartsAtOneAndWeightsHaveKerasLayouts) {
  auto lstm = MakeRnn("lstm", RnnCell::kLstm, RnnUnits(3));
  std::mt19937_64 rng(1);
  ASSERT_TRUE(lstm->Build({{-1, 5}}, BuildContext{&rng}).ok());
  EXPECT_EQ(Names(*lstm), (std::vector<std::string>{"kernel", "recurrent_kernel", "bias"}));
  EXPECT_EQ(lstm->weights()[0].value.shape(), Shape({5, 12}));
  EXPECT_EQ(lstm->weights()[1].value.shape(), Shape({3, 12}));
  EXPECT_EQ(Values(lstm->weights()[2].value),
            (std::vector<float>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
  auto gru = MakeRnn("gru", RnnCell::kGru, RnnUnits(3));
  ASSERT_TRUE(gru->Build({{-1, 5}}, BuildContext{&rng}).ok());
  EXPECT_EQ(gru->weights()[2].value.shape(), Shape({2, 9}));
  auto s = MakeRnn("s", RnnCell::kSimpleRnn, RnnUnits(3));
  ASSERT_TRUE(s->Build({{7, 5}}, BuildContext{&rng}).ok());
  EXPECT_EQ(s->weights()[1].value.shape(), Shape({3, 3}));
  // Inputs it cannot take.
  EXPECT_FALSE(MakeRnn("l", RnnCell::kLstm, RnnUnits(3))->Build({{5}}, BuildContext{&rng}).ok());
  EXPECT_FALSE(
      MakeRnn("l", RnnCell::kLstm, RnnUnits(3))->Build({{4, 5}, {3}}, BuildContext{&rng}).ok());
  EXPECT_FALSE(MakeRnn("l", RnnCell::kLstm, RnnUnits(3))
                   ->Build({{4, 5}, {2}, {3}}, BuildContext{&rng})
                   .ok());
}

TEST(RecurrentTest, InputDropoutDrawsOneMaskPerSequence) {
  // Kernel I, recurrent 0, linear: each output step is the input times the dropout mask.
  RnnOptions o = RnnUnits(4);
  o.activation = Activation{Act::kLinear, 0};
  o.use_bias = false;
  o.return_sequences = true;
  o.dropout = 0.5f;
  auto l = MakeRnn("rnn", RnnCell::kSimpleRnn, o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(l->Build({{6, 4}}, BuildContext{&rng}).ok());
  l->weights()[0].value = Tensor({4, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
  l->weights()[1].value = Tensor({4, 4});
  Tensor x({8, 6, 4}, 1.0f);
  RnnCall c = RunLayer(*l, {x}, {}, /*training=*/true);
  int zeros = 0;
  for (int64_t b = 0; b < 8; ++b) {
    for (int64_t t = 0; t < 6; ++t) {
      for (int64_t j = 0; j < 4; ++j) {
        const float v = c.out[0][(b * 6 + t) * 4 + j];
        EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
        EXPECT_EQ(v, c.out[0][b * 6 * 4 + j]) << "step " << t << " drew another mask";
        zeros += t == 0 && v == 0.0f;
      }
    }
  }
  EXPECT_GT(zeros, 4);
  EXPECT_LT(zeros, 28);
  // Not in inference.
  EXPECT_EQ(Values(RunLayer(*l, {x}).out[0]), std::vector<float>(8 * 6 * 4, 1.0f));
}

TEST(RecurrentTest, RecurrentDropoutDrawsOneMaskPerSequenceAndKeepsTheState) {
  // h = 1 + (h' * m) I, linear: per unit either 1, 1, 1 (m = 0) or 1, 3, 7 (m = 2); the
  // state itself is not dropped (h2 = 1 + m h1, not m (1 + h1)).
  RnnOptions o = RnnUnits(4);
  o.activation = Activation{Act::kLinear, 0};
  o.return_sequences = true;
  o.recurrent_dropout = 0.5f;
  o.recurrent_initializer.kind = Initializer::Kind::kIdentity;
  o.kernel_initializer = Zeros();
  o.bias_initializer = Ones();
  auto l = MakeRnn("rnn", RnnCell::kSimpleRnn, o);
  Tensor x({16, 3, 2});
  RnnCall c = RunLayer(*l, {x}, {}, /*training=*/true);
  int dropped = 0;
  for (int64_t b = 0; b < 16; ++b) {
    for (int64_t j = 0; j < 4; ++j) {
      const float h1 = c.out[0][(b * 3) * 4 + j], h2 = c.out[0][(b * 3 + 1) * 4 + j],
                  h3 = c.out[0][(b * 3 + 2) * 4 + j];
      EXPECT_EQ(h1, 1.0f);
      EXPECT_TRUE((h2 == 1 && h3 == 1) || (h2 == 3 && h3 == 7)) << h2 << " " << h3;
      dropped += h2 == 1;
    }
  }
  EXPECT_GT(dropped, 16);
  EXPECT_LT(dropped, 48);
  EXPECT_EQ(Values(RunLayer(*l, {x}).out[0])[8], 3.0f);  // inference: 1 + 1 + 1
}

// --- Gradients -------------------------------------------------------------------------------

TEST(RecurrentTest, GradientsOfEveryCellAndOption) {
  struct Case {
    RnnCell cell;
    bool seq, state, back, after, init;
  };
  const std::vector<Case> cases = {
      {RnnCell::kSimpleRnn, false, false, false, true, false},
      {RnnCell::kSimpleRnn, true, true, true, true, true},
      {RnnCell::kLstm, false, false, false, true, false},
      {RnnCell::kLstm, true, false, false, true, false},
      {RnnCell::kLstm, true, true, false, true, true},
      {RnnCell::kLstm, false, true, true, true, false},
      {RnnCell::kGru, true, false, false, true, false},
      {RnnCell::kGru, true, true, true, false, true},
      {RnnCell::kGru, false, true, false, false, false},
      {RnnCell::kGru, false, false, true, true, true},
  };
  for (const Case& k : cases) {
    RnnOptions o = RnnUnits(3);
    o.return_sequences = k.seq;
    o.return_state = k.state;
    o.go_backwards = k.back;
    o.reset_after = k.after;
    o.bias_initializer = RandomUniformInit(-0.3f, 0.3f);
    auto l = MakeRnn("rnn", k.cell, o);
    std::vector<Tensor> in{RandomTensor({2, 4, 5}, 1)};
    if (k.init) {
      for (int s = 0; s < (k.cell == RnnCell::kLstm ? 2 : 1); ++s) {
        in.push_back(RandomTensor({2, 3}, 10 + static_cast<uint64_t>(s), -0.5f, 0.5f));
      }
    }
    EXPECT_EQ(CheckLayerGradients(*l, in), "")
        << RnnClassName(k.cell) << " seq " << k.seq << " state " << k.state << " back " << k.back
        << " after " << k.after << " init " << k.init;
  }
}

TEST(RecurrentTest, GradientsUnderMasks) {
  // Post-padding, pre-padding and a hole, with initial states and both output rules.
  Tensor mask = MaskOf({{1, 1, 1, 0, 0}, {0, 0, 1, 1, 1}, {1, 0, 1, 1, 0}});
  for (RnnCell cell : {RnnCell::kSimpleRnn, RnnCell::kLstm, RnnCell::kGru}) {
    for (int variant = 0; variant < 4; ++variant) {
      RnnOptions o = RnnUnits(3);
      o.return_sequences = variant != 3;
      o.return_state = variant >= 1;
      o.go_backwards = variant == 2;
      o.zero_output_for_mask = variant == 1;
      o.reset_after = variant != 2;
      o.bias_initializer = RandomUniformInit(-0.3f, 0.3f);
      auto l = MakeRnn("rnn", cell, o);
      std::vector<Tensor> in{RandomTensor({3, 5, 2}, 2)};
      GradCheckOptions opt;
      opt.masks = {&mask};
      if (variant >= 2) {
        for (int s = 0; s < (cell == RnnCell::kLstm ? 2 : 1); ++s) {
          in.push_back(RandomTensor({3, 3}, 20 + static_cast<uint64_t>(s), -0.5f, 0.5f));
          opt.masks.push_back(nullptr);
        }
      }
      EXPECT_EQ(CheckLayerGradients(*l, in, opt), "") << RnnClassName(cell) << " " << variant;
    }
  }
}

TEST(RecurrentTest, GradientsOfOtherActivationsDropoutAndNoBias) {
  struct Case {
    RnnCell cell;
    const char* act;
    const char* rec;
    bool keras3, bias, per_gate;
    float dropout;
  };
  const std::vector<Case> cases = {
      {RnnCell::kLstm, "tanh", "hard_sigmoid", false, true, false, 0},
      {RnnCell::kLstm, "tanh", "hard_sigmoid", true, false, false, 0},
      {RnnCell::kGru, "softsign", "sigmoid", false, true, false, 0},
      {RnnCell::kSimpleRnn, "elu", "sigmoid", false, true, false, 0},
      {RnnCell::kSimpleRnn, "relu", "sigmoid", false, false, false, 0.3f},
      {RnnCell::kLstm, "tanh", "sigmoid", false, true, false, 0.4f},
      {RnnCell::kLstm, "tanh", "sigmoid", false, true, true, 0.4f},
      {RnnCell::kGru, "tanh", "sigmoid", false, true, true, 0.4f},
  };
  for (const Case& k : cases) {
    RnnOptions o = RnnUnits(3);
    o.activation = *ParseActivation(k.act, k.keras3);
    o.recurrent_activation = *ParseActivation(k.rec, k.keras3);
    o.use_bias = k.bias;
    o.dropout = k.dropout;
    o.dropout_per_gate = k.per_gate;
    o.return_sequences = true;
    o.bias_initializer = RandomUniformInit(-0.3f, 0.3f);
    auto l = MakeRnn("rnn", k.cell, o);
    // Inputs and weights small enough that the hard sigmoid and relu stay off their kinks.
    GradCheckOptions opt;
    opt.samples = 20;
    EXPECT_EQ(CheckLayerGradients(*l, {RandomTensor({2, 4, 3}, 3, -0.5f, 0.5f)}, opt), "")
        << RnnClassName(k.cell) << " " << k.act << " " << k.rec << " dropout " << k.dropout;
  }
}

TEST(RecurrentTest, GradientsUnderRecurrentDropout) {
  Tensor mask = MaskOf({{1, 1, 1, 0}, {0, 1, 1, 1}});
  for (RnnCell cell : {RnnCell::kSimpleRnn, RnnCell::kLstm, RnnCell::kGru}) {
    for (int variant = 0; variant < 4; ++variant) {
      RnnOptions o = RnnUnits(3);
      o.return_sequences = variant != 1;
      o.return_state = variant >= 2;
      o.go_backwards = variant == 3;
      o.reset_after = variant % 2 == 0;
      o.recurrent_dropout = 0.4f;
      o.dropout = variant >= 2 ? 0.3f : 0.0f;
      o.recurrent_dropout_per_gate = o.dropout_per_gate =
          cell != RnnCell::kSimpleRnn && variant != 2;
      o.bias_initializer = RandomUniformInit(-0.3f, 0.3f);
      auto l = MakeRnn("rnn", cell, o);
      GradCheckOptions opt;
      opt.samples = 16;
      if (variant == 3) opt.masks = {&mask};
      EXPECT_EQ(CheckLayerGradients(*l, {RandomTensor({2, 4, 3}, 9)}, opt), "")
          << RnnClassName(cell) << " " << variant;
    }
  }
}

TEST(RecurrentTest, EmbeddingWithMaskZeroFeedsLstmAndGru) {
  for (RnnCell cell : {RnnCell::kLstm, RnnCell::kGru}) {
    Graph g;
    std::mt19937_64 rng(5);
    BuildContext ctx{&rng};
    const int ids = g.AddInput("ids", {5});
    EmbeddingOptions eo;
    eo.input_dim = 6;
    eo.output_dim = 4;
    eo.mask_zero = true;
    eo.embeddings_initializer = RandomUniformInit(-1, 1);
    const int e = (*g.Call(g.AddLayer(MakeEmbedding("emb", eo)), {ids}, ctx))[0];
    RnnOptions o = RnnUnits(3);
    o.return_sequences = true;
    const int h = (*g.Call(g.AddLayer(MakeRnn("rnn", cell, o)), {e}, ctx))[0];
    RnnOptions last = RnnUnits(2);
    const int y = (*g.Call(g.AddLayer(MakeRnn("rnn2", cell, last)), {h}, ctx))[0];
    g.SetOutputs({y});
    Tensor x({3, 5}, {3, 1, 4, 0, 0, 0, 0, 2, 5, 1, 1, 0, 2, 0, 3});
    EXPECT_EQ(CheckGraphGradients(g, {x}), "") << RnnClassName(cell);
    // The padding's embedding (row 0) changes nothing: the layers after it see the mask.
    std::mt19937_64 r(1);
    g.Forward({&x}, CallContext{false, &r});
    const Tensor y1 = g.output(0);
    Weight& table = g.layers()[0]->weights()[0];
    for (int64_t j = 0; j < 4; ++j) table.value[j] += 0.5f;
    g.Forward({&x}, CallContext{false, &r});
    EXPECT_EQ(g.output(0), y1);
    table.value[5 * 4] += 0.5f;  // row 5 is not padding
    g.Forward({&x}, CallContext{false, &r});
    EXPECT_NE(g.output(0), y1);
  }
}

TEST(RecurrentTest, MaskedTailDoesNotChangeTheLastOutput) {
  // A post-padded sequence gives the same last output as the unpadded one.
  for (RnnCell cell : {RnnCell::kSimpleRnn, RnnCell::kLstm, RnnCell::kGru}) {
    auto l = MakeRnn("rnn", cell, RnnUnits(4));
    Tensor full = RandomTensor({1, 5, 3}, 8);
    Tensor head({1, 3, 3}, std::vector<float>(full.values().begin(), full.values().begin() + 9));
    Tensor mask = MaskOf({{1, 1, 1, 0, 0}});
    const Tensor a = RunLayer(*l, {full}, {&mask}).out[0];
    const Tensor b = RunLayer(*l, {head}).out[0];
    EXPECT_EQ(a, b) << RnnClassName(cell);
  }
}

// --- Embedding -------------------------------------------------------------------------------

TEST(EmbeddingTest, LooksUpRowsMasksZerosAndReportsBadIds) {
  EmbeddingOptions o;
  o.input_dim = 10;
  o.output_dim = 2;
  o.mask_zero = true;
  auto e = MakeEmbedding("emb", o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(e->Build({{3}}, BuildContext{&rng}).ok());
  ASSERT_EQ(Names(*e), std::vector<std::string>{"embeddings"});
  Tensor table({10, 2});
  for (int64_t i = 0; i < 20; ++i) table[i] = static_cast<float>(i);
  e->weights()[0].value = table;
  Tensor ids({2, 3}, {1, 0, 9, 3, 3, 0});
  RnnCall c = RunLayer(*e, {ids});
  EXPECT_EQ(Values(c.out[0]), (std::vector<float>{2, 3, 0, 1, 18, 19, 6, 7, 6, 7, 0, 1}));
  EXPECT_EQ(c.error, "");
  Args a{{&ids}, {nullptr}};
  const Tensor* m = e->OutputMask(a, c.saved);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(*m, Tensor({2, 3}, {1, 0, 1, 1, 1, 0}));
  EXPECT_FALSE(e->Differentiable(0));
  // An id out of range or not an integer reads zeros, and the first is reported.
  Tensor bad({2, 3}, {1, 12, 2, 2.5f, -1, 3});
  c = RunLayer(*e, {bad});
  EXPECT_EQ(c.error, "layer 'emb' (Embedding): id 12.0 at position [0, 1] is outside [0, 10)");
  EXPECT_EQ(Values(c.out[0]), (std::vector<float>{2, 3, 0, 0, 4, 5, 0, 0, 0, 0, 6, 7}));
  Tensor frac({1, 3}, {2.5f, 1, 1});
  EXPECT_EQ(RunLayer(*e, {frac}).error,
            "layer 'emb' (Embedding): id 2.5 at position [0, 0] is not an integer in [0, 10)");
  // Gradients go to the looked-up rows only (repeats add).
  Tensor ids2({1, 3}, {4, 4, 7});
  c = RunLayer(*e, {ids2});
  e->weights()[0].grad.Fill(0.0f);
  Tensor dy({1, 3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> din(1);
  e->Backward(Args{{&ids2}, {nullptr}}, c.out, {&dy}, {false}, &din, &c.saved);
  const Tensor& g = e->weights()[0].grad;
  EXPECT_EQ(g[8], 4);
  EXPECT_EQ(g[9], 6);
  EXPECT_EQ(g[14], 5);
  EXPECT_EQ(g[15], 6);
  EXPECT_EQ(g[0], 0);
  // Without mask_zero there is no output mask; input_length is checked.
  EmbeddingOptions plain = o;
  plain.mask_zero = false;
  plain.input_length = {4};
  auto p = MakeEmbedding("emb", plain);
  EXPECT_FALSE(p->Build({{3}}, BuildContext{&rng}).ok());
  ASSERT_TRUE(p->Build({{-1}}, BuildContext{&rng}).ok());
  Tensor ids4({1, 4}, {1, 0, 2, 0});
  EXPECT_EQ(p->OutputMask(Args{{&ids4}, {nullptr}}, RunLayer(*p, {ids4}).saved), nullptr);
}

// --- Wrappers --------------------------------------------------------------------------------

std::unique_ptr<Layer> Bi(RnnCell cell, BidirectionalMerge merge, RnnOptions o) {
  RnnOptions back = o;
  back.go_backwards = !o.go_backwards;
  o.zero_output_for_mask = back.zero_output_for_mask = o.return_sequences;
  const std::string n = cell == RnnCell::kLstm ? "lstm" : cell == RnnCell::kGru ? "gru" : "rnn";
  return MakeBidirectional("bi", MakeRnn("forward_" + n, cell, o),
                           MakeRnn("backward_" + n, cell, back), merge, o.return_sequences,
                           o.return_state);
}

TEST(BidirectionalTest, NamesWeightsLikeKerasAndConcatenatesBothDirections) {
  RnnOptions o = RnnUnits(2);
  o.return_sequences = true;
  auto bi = Bi(RnnCell::kLstm, BidirectionalMerge::kConcat, o);
  Tensor x = RandomTensor({2, 4, 3}, 4);
  RnnCall c = RunLayer(*bi, {x});
  EXPECT_EQ(Names(*bi),
            (std::vector<std::string>{"forward_lstm/kernel", "forward_lstm/recurrent_kernel",
                                      "forward_lstm/bias", "backward_lstm/kernel",
                                      "backward_lstm/recurrent_kernel", "backward_lstm/bias"}));
  ASSERT_EQ(c.out[0].shape(), Shape({2, 4, 4}));
  // The same computation by two plain layers holding the same weights.
  auto f = MakeRnn("f", RnnCell::kLstm, o);
  RnnOptions ob = o;
  ob.go_backwards = true;
  auto b = MakeRnn("b", RnnCell::kLstm, ob);
  RunLayer(*f, {x});
  RunLayer(*b, {x});
  for (int k = 0; k < 3; ++k) {
    f->weights()[static_cast<size_t>(k)].value = bi->weights()[static_cast<size_t>(k)].value;
    b->weights()[static_cast<size_t>(k)].value = bi->weights()[3 + static_cast<size_t>(k)].value;
  }
  const Tensor yf = RunLayer(*f, {x}).out[0], yb = RunLayer(*b, {x}).out[0];
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t t = 0; t < 4; ++t) {
      for (int64_t j = 0; j < 2; ++j) {
        EXPECT_EQ(c.out[0][(r * 4 + t) * 4 + j], yf[(r * 4 + t) * 2 + j]);
        EXPECT_EQ(c.out[0][(r * 4 + t) * 4 + 2 + j], yb[(r * 4 + (3 - t)) * 2 + j]);
      }
    }
  }
}

TEST(BidirectionalTest, GradientsOfEveryMergeModeWithMasksAndStates) {
  Tensor mask = MaskOf({{1, 1, 1, 0}, {1, 1, 0, 0}});
  for (BidirectionalMerge merge :
       {BidirectionalMerge::kConcat, BidirectionalMerge::kSum, BidirectionalMerge::kMul,
        BidirectionalMerge::kAve, BidirectionalMerge::kNone}) {
    for (int variant = 0; variant < 3; ++variant) {
      RnnOptions o = RnnUnits(3);
      o.return_sequences = variant != 1;
      o.return_state = variant == 2;
      o.bias_initializer = RandomUniformInit(-0.3f, 0.3f);
      const RnnCell cell = variant == 1 ? RnnCell::kGru : RnnCell::kLstm;
      auto bi = Bi(cell, merge, o);
      GradCheckOptions opt;
      opt.masks = {&mask};
      std::vector<Tensor> in{RandomTensor({2, 4, 3}, 6)};
      if (variant == 2) {  // initial states: forward h, c, then backward h, c
        for (uint64_t s = 0; s < 4; ++s) {
          in.push_back(RandomTensor({2, 3}, 30 + s, -0.5f, 0.5f));
          opt.masks.push_back(nullptr);
        }
      }
      EXPECT_EQ(CheckLayerGradients(*bi, in, opt), "")
          << static_cast<int>(merge) << " variant " << variant;
    }
  }
}

TEST(BidirectionalTest, MaskedSequencesAreZeroInBothDirections) {
  RnnOptions o = RnnUnits(2);
  o.return_sequences = true;
  auto bi = Bi(RnnCell::kGru, BidirectionalMerge::kNone, o);
  Tensor mask = MaskOf({{1, 1, 0}});
  RnnCall c = RunLayer(*bi, {RandomTensor({1, 3, 2}, 1)}, {&mask});
  ASSERT_EQ(c.out.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(c.out[static_cast<size_t>(k)][4], 0.0f);
    EXPECT_EQ(c.out[static_cast<size_t>(k)][5], 0.0f);
    EXPECT_NE(c.out[static_cast<size_t>(k)][0], 0.0f);
  }
}

TEST(TimeDistributedTest, AppliesDenseAtEveryStepWithItsOwnWeightNames) {
  DenseOptions d;
  d.units = 3;
  d.activation = *ParseActivation("tanh", false);
  auto td = MakeTimeDistributed("td", MakeDense("dense", d));
  Tensor x = RandomTensor({2, 4, 5}, 7);
  EXPECT_EQ(CheckLayerGradients(*td, {x}), "");
  EXPECT_EQ(Names(*td), (std::vector<std::string>{"kernel", "bias"}));
  RnnCall c = RunLayer(*td, {x});
  ASSERT_EQ(c.out[0].shape(), Shape({2, 4, 3}));
  // Equals the Dense layer on [batch * time, 5] with the same weights.
  auto plain = MakeDense("p", d);
  Tensor flat({8, 5}, x.values());
  RunLayer(*plain, {flat});
  plain->weights()[0].value = td->weights()[0].value;
  plain->weights()[1].value = td->weights()[1].value;
  EXPECT_EQ(RunLayer(*plain, {flat}).out[0].values(), c.out[0].values());
  // The mask passes through; over an Embedding no gradient flows to the ids.
  Tensor mask = MaskOf({{1, 0, 1, 1}, {1, 1, 0, 0}});
  EXPECT_EQ(td->OutputMask(Args{{&x}, {&mask}}, c.saved), &mask);
  EmbeddingOptions eo;
  eo.input_dim = 5;
  eo.output_dim = 2;
  auto te = MakeTimeDistributed("te", MakeEmbedding("e", eo));
  EXPECT_FALSE(te->Differentiable(0));
  EXPECT_EQ(CheckLayerGradients(*te, {Tensor({1, 2, 3}, {1, 2, 3, 4, 0, 1})}), "");
}

TEST(WrapperTest, SharedWrapperKeepsEachCallsRecordAndOneWeightSet) {
  Graph g;
  std::mt19937_64 rng(5);
  BuildContext ctx{&rng};
  const int a = g.AddInput("a", {4, 3});
  const int b = g.AddInput("b", {4, 3});
  RnnOptions o = RnnUnits(2);
  Layer* bi = g.AddLayer(Bi(RnnCell::kLstm, BidirectionalMerge::kSum, o));
  const int ya = (*g.Call(bi, {a}, ctx))[0];
  const int yb = (*g.Call(bi, {b}, ctx))[0];
  const int s =
      (*g.Call(g.AddLayer(MakeMerge("mul", "Multiply", MergeOp::kMultiply)), {ya, yb}, ctx))[0];
  g.SetOutputs({s});
  EXPECT_EQ(g.Params().size(), 6u);
  EXPECT_EQ(CheckGraphGradients(g, {RandomTensor({2, 4, 3}, 1), RandomTensor({2, 4, 3}, 2)}), "");
}

// --- Keras configs ---------------------------------------------------------------------------

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
  EXPECT_EQ(Names(**bi)[0], "forward_lstm_1/kernel");
  EXPECT_EQ(Names(**bi)[3], "backward_lstm_1/kernel");
  EXPECT_EQ(Find(**bi, "backward_lstm_1/recurrent_kernel")->value.shape(), Shape({256, 1024}));

  auto td = FromKeras(k003TimeDistributed, false);
  ASSERT_TRUE(td.ok()) << td.status();
  EXPECT_EQ(Shapes(**td, {{-1, 512}}), (std::vector<Shape>{{-1, 27}}));
  EXPECT_EQ(Names(**td), (std::vector<std::string>{"kernel", "bias"}));

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
  EXPECT_EQ(Names(**b3)[0], "forward_lstm/kernel");
  EXPECT_EQ(Names(**b3)[3], "backward_lstm/kernel");
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
