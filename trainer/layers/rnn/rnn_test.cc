// The recurrent layers and the wrappers against finite differences, hand-computed cases and
// Keras's masking rules.
#include "trainer/layers/rnn/rnn.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/graph/graph.h"
#include "trainer/graph/testing/forward.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/merging/merging.h"

namespace lockstep::trainer::graph {
namespace {

using testing::CheckGraphGradients;
using testing::CheckLayerGradients;
using testing::GradCheckOptions;
using testing::LayerCall;
using testing::MaskOf;
using testing::RandomTensor;
using testing::RunLayer;
using testing::Values;
using testing::WeightNames;

RnnOptions RnnUnits(int64_t u) {
  RnnOptions o;
  o.units = u;
  return o;
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
  LayerCall c = RunLayer(*TinyRnn(o), {kSeq}, {&mid});
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
  LayerCall sc = RunLayer(*seq, {kSeq}, {&mid});
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
  LayerCall c = RunLayer(*lstm, {Tensor({1, 1, 1}, x), Tensor({1, 1}, h0), Tensor({1, 1}, c0)});
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
    LayerCall gc = RunLayer(*gru, {Tensor({1, 1, 1}, x), Tensor({1, 1}, h0)});
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
  EXPECT_EQ(WeightNames(*lstm), (std::vector<std::string>{"kernel", "recurrent_kernel", "bias"}));
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
  LayerCall c = RunLayer(*l, {x}, {}, /*training=*/true);
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
  LayerCall c = RunLayer(*l, {x}, {}, /*training=*/true);
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
    o.bias_initializer = RandomUniform(-0.3f, 0.3f);
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
      o.bias_initializer = RandomUniform(-0.3f, 0.3f);
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
    o.bias_initializer = RandomUniform(-0.3f, 0.3f);
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
      o.bias_initializer = RandomUniform(-0.3f, 0.3f);
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
    eo.embeddings_initializer = RandomUniform(-1, 1);
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
  LayerCall c = RunLayer(*bi, {x});
  EXPECT_EQ(WeightNames(*bi),
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
      o.bias_initializer = RandomUniform(-0.3f, 0.3f);
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
  LayerCall c = RunLayer(*bi, {RandomTensor({1, 3, 2}, 1)}, {&mask});
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
  EXPECT_EQ(WeightNames(*td), (std::vector<std::string>{"kernel", "bias"}));
  LayerCall c = RunLayer(*td, {x});
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

}  // namespace
}  // namespace lockstep::trainer::graph
