// The convolution layers against finite differences, hand-computed cases and their Keras
// configs; and every layer of this family (convolution, pooling, normalization) against
// PyTorch through trainer/graph/oracle/conv_norm_oracle.py.
#include "trainer/layers/convolutional/convolutional.h"

#include <gtest/gtest.h>

#include <functional>

#include "trainer/graph/testing/forward.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/graph/testing/summation_bound.h"
#include "trainer/graph/testing/torch_oracle.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::graph {
namespace {

using nlohmann::json;
using testing::CheckLayerGradients;
using testing::Forward1;
using testing::FromJson;
using testing::PerExample;
using testing::RandomTensor;

ConvOptions Conv(int rank, int64_t filters, std::vector<int64_t> k, std::vector<int64_t> s,
                 std::vector<int64_t> d, Padding p) {
  ConvOptions o;
  o.rank = rank;
  o.filters = filters;
  o.kernel_size = std::move(k);
  o.strides = std::move(s);
  o.dilation_rate = std::move(d);
  o.padding = p;
  o.bias_initializer.kind = Initializer::Kind::kRandomUniform;  // gradients see the bias
  return o;
}

TEST(ConvLayersTest, SamePaddingPutsTheOddPadAtTheEnd) {
  AxisGeometry g = WindowAxis(8, 3, 2, 1, Padding::kSame);  // 4 outputs, 1 pad: after
  EXPECT_EQ(g.out, 4);
  EXPECT_EQ(g.pad_before, 0);
  g = WindowAxis(7, 3, 2, 1, Padding::kSame);  // 4 outputs, 2 pads: one each side
  EXPECT_EQ(g.out, 4);
  EXPECT_EQ(g.pad_before, 1);
  g = WindowAxis(5, 4, 1, 1, Padding::kSame);  // 3 pads: 1 before, 2 after
  EXPECT_EQ(g.out, 5);
  EXPECT_EQ(g.pad_before, 1);
  g = WindowAxis(9, 3, 1, 2, Padding::kValid);  // span 5
  EXPECT_EQ(g.out, 5);
  EXPECT_EQ(g.pad_before, 0);
  g = WindowAxis(10, 3, 1, 2, Padding::kCausal);
  EXPECT_EQ(g.out, 10);
  EXPECT_EQ(g.pad_before, 4);
  EXPECT_EQ(WindowAxis(2, 3, 1, 1, Padding::kValid).out, 0);
  EXPECT_EQ(WindowAxis(-1, 3, 1, 1, Padding::kSame).out, -1);
}

TEST(ConvLayersTest, Conv1DSamePadsAfterAndCausalPadsBefore) {
  ConvOptions o = Conv(1, 1, {2}, {1}, {1}, Padding::kSame);
  o.use_bias = false;
  auto c = MakeConv("c", o);
  Tensor x({1, 3, 1}, {1, 2, 3});
  std::mt19937_64 rng(1);
  ASSERT_TRUE(c->Build({{3, 1}}, BuildContext{&rng}).ok());
  c->weights()[0].value = Tensor({2, 1, 1}, {1, 10});
  // Padding 0 before, 1 after: y[t] = x[t] + 10 x[t + 1].
  EXPECT_EQ(Forward1(*c, x), Tensor({1, 3, 1}, {21, 32, 3}));
  o.padding = Padding::kCausal;
  auto causal = MakeConv("c", o);
  ASSERT_TRUE(causal->Build({{3, 1}}, BuildContext{&rng}).ok());
  causal->weights()[0].value = Tensor({2, 1, 1}, {1, 10});
  // Padding 1 before: y[t] = x[t - 1] + 10 x[t].
  EXPECT_EQ(Forward1(*causal, x), Tensor({1, 3, 1}, {10, 21, 32}));
}

TEST(ConvLayersTest, Conv2DSameWithOnesAndBias) {
  ConvOptions o = Conv(2, 1, {2, 2}, {1, 1}, {1, 1}, Padding::kSame);
  o.bias_initializer = Zeros();
  auto c = MakeConv("c", o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(c->Build({{3, 3, 1}}, BuildContext{&rng}).ok());
  c->weights()[0].value.Fill(1.0f);
  c->weights()[1].value.Fill(0.5f);
  Tensor x({1, 3, 3, 1}, 1.0f);
  EXPECT_EQ(Forward1(*c, x),
            Tensor({1, 3, 3, 1}, {4.5f, 4.5f, 2.5f, 4.5f, 4.5f, 2.5f, 2.5f, 2.5f, 1.5f}));
  EXPECT_EQ(c->weights()[0].value.shape(), Shape({2, 2, 1, 1}));
}

TEST(ConvLayersTest, ConvGradientsForEveryPaddingStrideAndDilation) {
  struct Case {
    ConvOptions o;
    Shape x;
  };
  std::vector<Case> cases = {
      {Conv(1, 3, {3}, {1}, {1}, Padding::kValid), {2, 7, 2}},
      {Conv(1, 3, {3}, {2}, {1}, Padding::kSame), {2, 8, 2}},
      {Conv(1, 2, {3}, {1}, {2}, Padding::kCausal), {2, 9, 3}},
      {Conv(1, 2, {2}, {3}, {1}, Padding::kCausal), {2, 7, 2}},
      {Conv(2, 4, {3, 3}, {1, 1}, {1, 1}, Padding::kSame), {2, 5, 4, 3}},
      {Conv(2, 4, {3, 2}, {2, 3}, {1, 1}, Padding::kSame), {2, 7, 8, 2}},
      {Conv(2, 3, {3, 3}, {1, 1}, {2, 2}, Padding::kValid), {2, 7, 6, 2}},
      {Conv(2, 3, {2, 2}, {1, 1}, {2, 1}, Padding::kSame), {2, 5, 5, 2}},
      {Conv(2, 5, {1, 1}, {1, 1}, {1, 1}, Padding::kValid), {2, 3, 4, 6}},  // no im2col
      {Conv(2, 3, {1, 1}, {2, 2}, {1, 1}, Padding::kSame), {2, 5, 4, 2}},
      {Conv(3, 2, {2, 3, 2}, {1, 2, 1}, {1, 1, 1}, Padding::kSame), {2, 3, 5, 4, 2}},
      {Conv(3, 2, {2, 2, 2}, {1, 1, 1}, {1, 2, 1}, Padding::kValid), {1, 4, 5, 3, 2}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    ConvOptions o = cases[i].o;
    o.activation = *ParseActivation(i % 2 == 0 ? "tanh" : "linear", false);
    o.use_bias = i % 3 != 2;
    auto c = MakeConv("c", o);
    EXPECT_EQ(CheckLayerGradients(*c, {RandomTensor(cases[i].x, i + 1)}), "") << "case " << i;
  }
}

TEST(ConvLayersTest, FrozenConvGivesInputGradientsOnly) {
  auto c = MakeConv("c", Conv(2, 2, {3, 3}, {1, 1}, {1, 1}, Padding::kSame));
  c->set_trainable(false);
  EXPECT_EQ(CheckLayerGradients(*c, {RandomTensor({2, 4, 4, 2}, 1)}), "");
  for (const Weight& w : c->weights()) EXPECT_FALSE(w.trainable);
}

// Selects a convolution backend for one test and restores oneDNN after it.
struct UseBackend {
  explicit UseBackend(ConvBackend b) { SetConvBackend(b); }
  ~UseBackend() { SetConvBackend(ConvBackend::kOneDnn); }
};

Tensor Abs(Tensor t) {
  for (float& v : t.values()) v = std::abs(v);
  return t;
}

// Forward and backward of a freshly built layer on x, with dy drawn from `seed`: the output,
// the input gradient and every weight gradient, in that order. With `absolute`, on the
// absolute values of x, the weights and dy: for a linear layer, each element is then the sum
// of the magnitudes of the products behind it (summation_bound.h).
std::vector<Tensor> RunOnce(Layer& l, const Tensor& x_in, uint64_t seed, bool absolute = false) {
  std::mt19937_64 rng(7);
  EXPECT_TRUE(l.Build({PerExample(x_in)}, BuildContext{&rng}).ok());
  const Tensor x = absolute ? Abs(x_in) : x_in;
  if (absolute) {
    for (Weight& w : l.weights()) w.value = Abs(w.value);
  }
  std::vector<Tensor> out(1), din(1);
  Saved s;
  l.Forward(Args{{&x}, {nullptr}}, &out, &s, CallContext{true, &rng});
  const Tensor dy =
      absolute ? Abs(RandomTensor(out[0].shape(), seed)) : RandomTensor(out[0].shape(), seed);
  for (Weight& w : l.weights()) w.grad.Fill(0.0f);
  l.Backward(Args{{&x}, {nullptr}}, out, {&dy}, {true}, &din, &s);
  std::vector<Tensor> r{out[0], din[0]};
  for (const Weight& w : l.weights()) r.push_back(w.grad);
  return r;
}

// oneDNN's primitives against the loops (im2col + GEMM, direct depthwise loops), on fresh
// random data of realistic sizes: ResNet and EfficientNet shapes, strides, dilation, odd
// padding, 1D/3D, depthwise multipliers, and a layer called on two batch sizes. The two add
// in different orders, which also differ by CPU (AVX2 or AVX-512 kernels): each element is
// held to the summation bound of its sum's length and magnitude (summation_bound.h), the
// magnitudes from the loops run on absolute values.
TEST(ConvLayersTest, OneDnnMatchesTheLoops) {
  struct Case {
    std::string what;
    std::function<std::unique_ptr<Layer>()> make;
    Shape x;
  };
  auto conv = [](ConvOptions o) { return [o] { return MakeConv("c", o); }; };
  auto depthwise = [](std::vector<int64_t> k, std::vector<int64_t> st, int64_t mult, Padding p) {
    return [=] {
      DepthwiseOptions o;
      o.rank = static_cast<int>(k.size());
      o.kernel_size = k;
      o.strides = st;
      o.dilation_rate = std::vector<int64_t>(k.size(), 1);
      o.depth_multiplier = mult;
      o.padding = p;
      o.bias_initializer.kind = Initializer::Kind::kRandomUniform;
      return MakeDepthwiseConv("d", o);
    };
  };
  std::vector<Case> cases = {
      {"resnet 3x3 same",
       conv(Conv(2, 16, {3, 3}, {1, 1}, {1, 1}, Padding::kSame)),
       {8, 32, 32, 16}},
      {"resnet 3x3 stride 2",
       conv(Conv(2, 32, {3, 3}, {2, 2}, {1, 1}, Padding::kSame)),
       {8, 32, 32, 16}},
      {"1x1 stride 2", conv(Conv(2, 64, {1, 1}, {2, 2}, {1, 1}, Padding::kValid)), {4, 16, 16, 32}},
      {"stem 3 channels", conv(Conv(2, 8, {5, 3}, {2, 1}, {1, 1}, Padding::kSame)), {4, 17, 13, 3}},
      {"dilated valid", conv(Conv(2, 6, {3, 3}, {1, 1}, {2, 3}, Padding::kValid)), {3, 15, 16, 5}},
      {"valid leftover", conv(Conv(2, 4, {3, 3}, {2, 2}, {1, 1}, Padding::kValid)), {2, 10, 9, 3}},
      {"conv1d causal", conv(Conv(1, 7, {4}, {1}, {2}, Padding::kCausal)), {4, 30, 6}},
      {"conv3d",
       conv(Conv(3, 4, {3, 3, 2}, {1, 2, 1}, {1, 1, 1}, Padding::kSame)),
       {2, 6, 7, 5, 3}},
      {"depthwise", depthwise({3, 3}, {1, 1}, 1, Padding::kSame), {4, 16, 16, 24}},
      {"depthwise stride 2 x2", depthwise({5, 5}, {2, 2}, 2, Padding::kSame), {2, 15, 15, 8}},
      {"depthwise 1d", depthwise({3}, {1}, 3, Padding::kValid), {3, 20, 4}},
  };
  for (const Case& c : cases) {
    const Tensor x = RandomTensor(c.x, 11);
    std::vector<Tensor> loops, dnnl;
    {
      UseBackend b(ConvBackend::kLoops);
      loops = RunOnce(*c.make(), x, 12);
    }
    const int64_t refused = OneDnnRefusals();
    dnnl = RunOnce(*c.make(), x, 12);
    ASSERT_EQ(OneDnnRefusals(), refused) << c.what << ": oneDNN refused the geometry";
    ASSERT_EQ(loops.size(), dnnl.size()) << c.what;
    std::vector<Tensor> magnitude;
    {
      UseBackend b(ConvBackend::kLoops);
      magnitude = RunOnce(*c.make(), x, 12, /*absolute=*/true);
    }
    // The longest sum behind an element of each: an output adds taps x input channels per
    // output channel (taps for a depthwise one) and the bias; an input gradient, taps x the
    // output channels fed by one input channel; the weight gradients, examples x positions.
    const int64_t kernel = loops[2].size(), out_channels = loops[0].shape().back();
    const int64_t in_channels = x.shape().back();
    const int64_t lengths[] = {kernel / out_channels + 1, kernel / in_channels,
                               loops[0].size() / out_channels, loops[0].size() / out_channels};
    const char* names[] = {"output", "input gradient", "kernel gradient", "bias gradient"};
    for (size_t i = 0; i < loops.size(); ++i) {
      ASSERT_EQ(loops[i].shape(), dnnl[i].shape()) << c.what << " " << names[i];
      EXPECT_EQ(testing::SummationMismatch(dnnl[i], loops[i], magnitude[i], lengths[i]), "")
          << c.what << " " << names[i];
    }
  }
  // One layer called on two batch sizes keeps a primitive per shape: a batch of one (the first
  // example of the larger batch), then the larger batch again.
  auto l = MakeConv("c", Conv(2, 4, {3, 3}, {1, 1}, {1, 1}, Padding::kSame));
  const Tensor big = RandomTensor({4, 6, 6, 2}, 1);
  Tensor first({1, 6, 6, 2});
  std::copy_n(big.data(), first.size(), first.data());
  const Tensor yb = Forward1(*l, big);
  const Tensor ys = Forward1(*l, first);
  const Tensor yb2 = Forward1(*l, big);
  for (int64_t i = 0; i < ys.size(); ++i) ASSERT_NEAR(ys[i], yb[i], 1e-5f) << i;
  for (int64_t i = 0; i < yb.size(); ++i) ASSERT_EQ(yb2[i], yb[i]) << i;
}

TEST(ConvLayersTest, LargeBatchesRunInChunksWithTheSameResult) {
  // 4096 outputs x (5 taps x 1000 channels) per example passes half the 32M-float patch
  // budget, so each example is its own GEMM; the batch must match examples run one by one.
  // (The chunking is the loops' own: oneDNN tiles its work itself.)
  UseBackend loops(ConvBackend::kLoops);
  auto c = MakeConv("c", Conv(1, 2, {5}, {1}, {1}, Padding::kValid));
  const Tensor x = RandomTensor({2, 4100, 1000}, 3);
  const Tensor y = Forward1(*c, x);
  for (int64_t n = 0; n < 2; ++n) {
    Tensor xn({1, 4100, 1000});
    std::copy_n(x.data() + n * xn.size(), xn.size(), xn.data());
    const Tensor yn = Forward1(*c, xn);
    for (int64_t i = 0; i < yn.size(); ++i) {
      ASSERT_FLOAT_EQ(y[n * yn.size() + i], yn[i]) << n << " " << i;
    }
  }
  // And the backward pass: the batch's kernel gradient is the sum of the examples'.
  Saved s;
  std::vector<Tensor> out(1);
  std::mt19937_64 rng(1);
  c->Forward(Args{{&x}, {nullptr}}, &out, &s, CallContext{true, &rng});
  const Tensor dy = RandomTensor(out[0].shape(), 4);
  c->weights()[0].grad.Fill(0.0f);
  std::vector<Tensor> din(1);
  c->Backward(Args{{&x}, {nullptr}}, out, {&dy}, {true}, &din, &s);
  const Tensor batch_grad = c->weights()[0].grad;
  Tensor sum_grad(batch_grad.shape());
  for (int64_t n = 0; n < 2; ++n) {
    Tensor xn({1, 4100, 1000}), dyn({1, 4096, 2});
    std::copy_n(x.data() + n * xn.size(), xn.size(), xn.data());
    std::copy_n(dy.data() + n * dyn.size(), dyn.size(), dyn.data());
    Saved sn;
    std::vector<Tensor> on(1), dn(1);
    c->Forward(Args{{&xn}, {nullptr}}, &on, &sn, CallContext{true, &rng});
    c->weights()[0].grad.Fill(0.0f);
    c->Backward(Args{{&xn}, {nullptr}}, on, {&dyn}, {true}, &dn, &sn);
    for (int64_t i = 0; i < sum_grad.size(); ++i) sum_grad[i] += c->weights()[0].grad[i];
    for (int64_t i = 0; i < dn[0].size(); ++i) {
      ASSERT_FLOAT_EQ(din[0][n * xn.size() + i], dn[0][i]) << n << " " << i;
    }
  }
  // The two add the 2 x 4096 products of each kernel element in different orders: held to
  // their summation bound, the magnitudes from the same pass over |x| and |dy|.
  const Tensor xa = Abs(x), dya = Abs(dy);
  Saved sa;
  std::vector<Tensor> oa(1), da(1);
  c->Forward(Args{{&xa}, {nullptr}}, &oa, &sa, CallContext{true, &rng});
  c->weights()[0].grad.Fill(0.0f);
  c->Backward(Args{{&xa}, {nullptr}}, oa, {&dya}, {true}, &da, &sa);
  EXPECT_EQ(testing::SummationMismatch(batch_grad, sum_grad, c->weights()[0].grad, 2 * 4096), "");
}

TEST(ConvLayersTest, TransposeGradientsAndKerasLengths) {
  struct Case {
    int rank;
    std::vector<int64_t> k, s;
    Padding p;
    std::optional<std::vector<int64_t>> op;
    Shape x, y;
  };
  std::vector<Case> cases = {
      {2, {3, 3}, {2, 2}, Padding::kSame, std::nullopt, {2, 3, 4, 2}, {6, 8, 3}},
      {2, {3, 3}, {2, 2}, Padding::kValid, std::nullopt, {2, 3, 4, 2}, {7, 9, 3}},
      {2, {2, 2}, {3, 3}, Padding::kValid, std::nullopt, {2, 3, 2, 2}, {9, 6, 3}},
      {2, {4, 3}, {2, 1}, Padding::kSame, std::nullopt, {1, 3, 4, 2}, {6, 4, 3}},
      {2, {3, 3}, {2, 2}, Padding::kSame, std::vector<int64_t>{1, 0}, {2, 3, 3, 2}, {6, 5, 3}},
      {2, {3, 3}, {2, 2}, Padding::kValid, std::vector<int64_t>{1, 1}, {1, 3, 3, 2}, {8, 8, 3}},
      {1, {3}, {2}, Padding::kSame, std::nullopt, {2, 5, 3}, {10, 3}},
      {3, {2, 3, 2}, {2, 1, 2}, Padding::kSame, std::nullopt, {1, 2, 3, 2, 2}, {4, 3, 4, 3}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    ConvTransposeOptions o;
    o.rank = cases[i].rank;
    o.filters = 3;
    o.kernel_size = cases[i].k;
    o.strides = cases[i].s;
    o.padding = cases[i].p;
    o.output_padding = cases[i].op;
    o.bias_initializer.kind = Initializer::Kind::kRandomUniform;
    o.activation = *ParseActivation(i % 2 == 0 ? "linear" : "sigmoid", false);
    auto t = MakeConvTranspose("t", o);
    std::mt19937_64 rng(1);
    auto out = t->Build({Shape(cases[i].x.begin() + 1, cases[i].x.end())}, BuildContext{&rng});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0], cases[i].y) << "case " << i;
    Shape ks = cases[i].k;
    ks.push_back(3);
    ks.push_back(cases[i].x.back());
    EXPECT_EQ(t->weights()[0].value.shape(), ks);  // [k..., filters, in]
    EXPECT_EQ(CheckLayerGradients(*t, {RandomTensor(cases[i].x, i + 1)}), "") << "case " << i;
  }
}

TEST(ConvLayersTest, TransposeIsTheAdjointOfTheConvolution) {
  // <conv(a), b> == <a, conv_transpose(b)> with the same kernel, as Keras's layers are.
  ConvOptions co = Conv(2, 2, {3, 3}, {2, 2}, {1, 1}, Padding::kSame);
  co.use_bias = false;
  auto conv = MakeConv("c", co);
  ConvTransposeOptions to;
  to.filters = 3;  // the convolution's input channels
  to.kernel_size = {3, 3};
  to.strides = {2, 2};
  to.padding = Padding::kSame;
  to.use_bias = false;
  auto tr = MakeConvTranspose("t", to);
  const Tensor a = RandomTensor({1, 6, 6, 3}, 1);
  const Tensor b = RandomTensor({1, 3, 3, 2}, 2);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(conv->Build({{6, 6, 3}}, BuildContext{&rng}).ok());
  ASSERT_TRUE(tr->Build({{3, 3, 2}}, BuildContext{&rng}).ok());
  // Conv kernel [3, 3, in=3, out=2]; the transpose's [3, 3, filters=3, in=2]: the same array.
  tr->weights()[0].value = conv->weights()[0].value;
  const Tensor ca = Forward1(*conv, a);
  const Tensor tb = Forward1(*tr, b);
  ASSERT_EQ(tb.shape(), a.shape());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < ca.size(); ++i) lhs += static_cast<double>(ca[i]) * b[i];
  for (int64_t i = 0; i < a.size(); ++i) rhs += static_cast<double>(a[i]) * tb[i];
  EXPECT_NEAR(lhs, rhs, 1e-4);
}

TEST(ConvLayersTest, DepthwiseAndSeparableGradients) {
  for (int64_t mult : {1, 3}) {
    for (Padding p : {Padding::kValid, Padding::kSame}) {
      DepthwiseOptions o;
      o.kernel_size = {3, 2};
      o.strides = {2, 1};
      o.padding = p;
      o.depth_multiplier = mult;
      o.bias_initializer.kind = Initializer::Kind::kRandomUniform;
      o.activation = *ParseActivation("tanh", false);
      auto d = MakeDepthwiseConv("d", o);
      EXPECT_EQ(CheckLayerGradients(*d, {RandomTensor({2, 5, 4, 3}, 1)}), "") << mult;
      EXPECT_EQ(d->weights()[0].value.shape(), Shape({3, 2, 3, mult}));
      EXPECT_EQ(d->weights()[0].name, "depthwise_kernel");
    }
    DepthwiseOptions dil;
    dil.rank = 1;
    dil.kernel_size = {3};
    dil.strides = {1};
    dil.dilation_rate = {2};
    dil.depth_multiplier = mult;
    EXPECT_EQ(CheckLayerGradients(*MakeDepthwiseConv("d", dil), {RandomTensor({2, 8, 2}, 2)}), "");
    SeparableOptions s;
    s.filters = 4;
    s.kernel_size = {3, 3};
    s.strides = {2, 2};
    s.padding = Padding::kSame;
    s.depth_multiplier = mult;
    s.bias_initializer.kind = Initializer::Kind::kRandomUniform;
    auto sep = MakeSeparableConv("s", s);
    EXPECT_EQ(CheckLayerGradients(*sep, {RandomTensor({2, 5, 5, 2}, 3)}), "");
    EXPECT_EQ(sep->weights()[1].value.shape(), Shape({1, 1, 2 * mult, 4}));
    SeparableOptions s1 = s;
    s1.rank = 1;
    s1.kernel_size = {3};
    s1.strides = {1};
    s1.dilation_rate = {1};
    s1.padding = Padding::kCausal;
    EXPECT_EQ(CheckLayerGradients(*MakeSeparableConv("s", s1), {RandomTensor({2, 6, 3}, 4)}), "");
  }
}

TEST(ConvLayersTest, ShapesMasksAndBadInput) {
  auto c = MakeConv("c", Conv(1, 2, {3}, {1}, {1}, Padding::kValid));
  std::mt19937_64 rng(1);
  auto out = c->Build({{-1, 4}}, BuildContext{&rng});  // a text model's open length
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({-1, 2}));
  EXPECT_FALSE(c->Build({{-1, 5}}, BuildContext{&rng}).ok());  // other channels
  EXPECT_FALSE(MakeConv("c", Conv(1, 2, {3}, {1}, {1}, Padding::kValid))
                   ->Build({{2, 4}}, BuildContext{&rng})
                   .ok());  // shorter than the kernel
  EXPECT_FALSE(MakeConv("c", Conv(2, 2, {3, 3}, {1, 1}, {1, 1}, Padding::kValid))
                   ->Build({{5, 4}}, BuildContext{&rng})
                   .ok());  // rank
  // A mask does not pass a convolution.
  Tensor x = RandomTensor({1, 5, 4}, 1), mask({1, 5}, 1.0f);
  std::vector<Tensor> y(1);
  Saved s;
  Args args{{&x}, {&mask}};
  c->Forward(args, &y, &s, CallContext{});
  EXPECT_EQ(c->OutputMask(args, s), nullptr);
  // At run time, too short an input is reported and gives an empty output.
  std::string error;
  Tensor shortx = RandomTensor({1, 2, 4}, 1);
  c->Forward(Args{{&shortx}, {nullptr}}, &y, &s, CallContext{false, &rng, &error});
  EXPECT_EQ(error, "layer 'c' (Conv1D): input [1, 2, 4] is smaller than the window [3]");
  EXPECT_EQ(y[0].shape(), Shape({1, 0, 2}));
}

// ---- Factories from Keras configs.

TEST(ConvFactoryTest, RealConfigsBuildWithKerasWeights) {
  // 011-text-conv1d-globalmax.json (Keras 2.0).
  auto c1 = FromJson(R"({"class_name": "Conv1D", "config": {"name": "conv1d_1", "trainable": true,
    "filters": 64, "kernel_size": [5], "strides": [1], "padding": "valid",
    "data_format": "channels_last", "dilation_rate": [1], "activation": "relu", "use_bias": true,
    "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": 1.0,
    "mode": "fan_avg", "distribution": "uniform", "seed": null}},
    "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null,
    "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null,
    "bias_constraint": null}})");
  ASSERT_TRUE(c1.ok()) << c1.status();
  std::mt19937_64 rng(1);
  auto out = (*c1)->Build({{100, 8}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({96, 64}));
  EXPECT_EQ((*c1)->class_name(), "Conv1D");
  EXPECT_EQ((*c1)->weights()[0].name, "kernel");
  EXPECT_EQ((*c1)->weights()[0].value.shape(), Shape({5, 8, 64}));
  EXPECT_EQ((*c1)->weights()[1].name, "bias");

  // 015-dcgan-generator.json.
  auto t = FromJson(R"({"class_name": "Conv2DTranspose", "config": {"name": "conv2d_transpose_8",
    "trainable": true, "dtype": "float32", "filters": 128, "kernel_size": [3, 3],
    "strides": [1, 1], "padding": "same", "data_format": "channels_last",
    "dilation_rate": [1, 1], "groups": 1, "activation": "linear", "use_bias": true,
    "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}},
    "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null,
    "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null,
    "bias_constraint": null, "output_padding": null}})");
  ASSERT_TRUE(t.ok()) << t.status();
  out = (*t)->Build({{7, 7, 256}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({7, 7, 128}));
  EXPECT_EQ((*t)->weights()[0].value.shape(), Shape({3, 3, 128, 256}));

  // 041-k3-mobilenetv2-functional.json (Keras 3).
  auto d = FromJson(R"({"module": "keras.layers", "class_name": "DepthwiseConv2D", "config": {
    "name": "expanded_conv_depthwise", "trainable": true, "dtype": "float32",
    "depth_multiplier": 1, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same",
    "data_format": "channels_last", "dilation_rate": [1, 1], "activation": "linear",
    "use_bias": false, "depthwise_initializer": {"module": "keras.initializers",
    "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
    "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {},
    "registered_name": null}, "depthwise_regularizer": null, "bias_regularizer": null,
    "activity_regularizer": null, "depthwise_constraint": null, "bias_constraint": null},
    "registered_name": null, "build_config": {"input_shape": [null, 112, 112, 32]},
    "name": "expanded_conv_depthwise"})",
                    true);
  ASSERT_TRUE(d.ok()) << d.status();
  out = (*d)->Build({{112, 112, 32}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({112, 112, 32}));
  ASSERT_EQ((*d)->weights().size(), 1u);
  EXPECT_EQ((*d)->weights()[0].name, "depthwise_kernel");
  EXPECT_EQ((*d)->weights()[0].value.shape(), Shape({3, 3, 32, 1}));
}

TEST(ConvFactoryTest, RegularizersStridesAndCausalPadding) {
  auto c = FromJson(R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 4,
    "kernel_size": 3, "strides": 2, "padding": "same", "activation": "relu",
    "kernel_regularizer": {"class_name": "L1L2", "config": {"l1": 0.01, "l2": 0.02}},
    "bias_regularizer": {"class_name": "L2", "config": {"l2": 0.5}}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  std::mt19937_64 rng(1);
  auto out = (*c)->Build({{7, 8, 3}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({4, 4, 4}));
  EXPECT_FLOAT_EQ((*c)->weights()[0].l1, 0.01f);
  EXPECT_FLOAT_EQ((*c)->weights()[0].l2, 0.02f);
  EXPECT_FLOAT_EQ((*c)->weights()[1].l2, 0.5f);
  auto causal = FromJson(R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2,
    "kernel_size": [3], "dilation_rate": [4], "padding": "causal"}})");
  ASSERT_TRUE(causal.ok()) << causal.status();
  out = (*causal)->Build({{10, 3}}, BuildContext{&rng});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], Shape({10, 2}));
  for (const char* cls : {"Conv3D", "Conv1DTranspose", "Conv3DTranspose", "DepthwiseConv1D",
                          "SeparableConv1D", "SeparableConv2D"}) {
    EXPECT_NE(keras::LayerFactories::Get().Find(cls), nullptr) << cls;
  }
}

TEST(ConvFactoryTest, RefusalsNameTheOption) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
        "data_format": "channels_first"}})",
       "layer 'c' (Conv2D): option data_format=\"channels_first\" is not supported"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 4, "kernel_size": 3,
        "groups": 2}})",
       "layer 'c' (Conv2D): option groups=2 is not supported"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 4, "kernel_size": 3,
        "mystery": 1}})",
       "layer 'c' (Conv2D): option mystery=1 is not supported"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 4, "kernel_size": 3,
        "padding": "causal"}})",
       "layer 'c' (Conv2D): option padding=\"causal\" is not supported"},
      {R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 4, "kernel_size": 3,
        "kernel_constraint": {"class_name": "MaxNorm", "config": {"max_value": 2}}}})",
       "layer 'c' (Conv1D): option kernel_constraint={\"class_name\":\"MaxNorm\",\"config\":"
       "{\"max_value\":2}} is not supported"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 4, "kernel_size": 3,
        "lora_rank": 4}})",
       "layer 'c' (Conv2D): option lora_rank=4 is not supported"},
      {R"({"class_name": "Conv2DTranspose", "config": {"name": "t", "filters": 4,
        "kernel_size": 3, "dilation_rate": [2, 2]}})",
       "layer 't' (Conv2DTranspose): option dilation_rate=[2, 2] is not supported"},
      {R"({"class_name": "Conv2DTranspose", "config": {"name": "t", "filters": 4,
        "kernel_size": 3, "strides": 2, "output_padding": [2, 1]}})",
       "layer 't' (Conv2DTranspose): option output_padding=[2, 1] must be non-negative and "
       "less than the strides [2, 2]"},
      {R"({"class_name": "DepthwiseConv2D", "config": {"name": "d", "kernel_size": 3,
        "depthwise_constraint": {"class_name": "NonNeg", "config": {}}}})",
       "layer 'd' (DepthwiseConv2D): option depthwise_constraint={\"class_name\":\"NonNeg\","
       "\"config\":{}} is not supported"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "kernel_size": 3}})",
       "layer 'c' (Conv2D): option filters must be a positive integer"},
      {R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 3}})",
       "layer 'c' (Conv2D): option kernel_size is required"},
  };
  for (const Case& c : cases) {
    auto l = FromJson(c.json);
    ASSERT_FALSE(l.ok()) << c.json;
    EXPECT_EQ(l.status().message(), c.message);
  }
}

// ---- PyTorch as an oracle for this family's layers (conv, pooling, normalization).

class ConvNormOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvNormOracleTest, MatchesPyTorch) {
  const std::string name = GetParam();
  auto j = testing::RunTorchOracle("trainer/graph/oracle/conv_norm_oracle.py", name);
  if (!j.ok() && absl::IsUnavailable(j.status())) GTEST_SKIP() << j.status();
  ASSERT_TRUE(j.ok()) << j.status();
  auto built = keras::LayerFactories::Get().Build((*j)["layer"], (*j)["keras3"].get<bool>());
  ASSERT_TRUE(built.ok()) << built.status();
  Layer& l = **built;
  const Tensor x = testing::TensorFromJson((*j)["x"]);
  std::mt19937_64 rng(1);
  auto shapes = l.Build({PerExample(x)}, BuildContext{&rng});
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  const json& weights = (*j)["weights"];
  ASSERT_EQ(l.weights().size(), weights.size());
  for (Weight& w : l.weights()) {
    ASSERT_TRUE(weights.contains(w.name)) << w.name;
    Tensor v = testing::TensorFromJson(weights[w.name]);
    ASSERT_EQ(v.shape(), w.value.shape()) << w.name;
    w.value = v;
    if (w.trainable) w.grad.Fill(0.0f);
  }
  const bool training = (*j)["training"].get<bool>();
  std::vector<Tensor> out(1);
  Saved s;
  Args args{{&x}, {nullptr}};
  l.Forward(args, &out, &s, CallContext{training, &rng});
  const double tol = 1e-4;
  EXPECT_LT(testing::MaxRelativeError(out[0], testing::TensorFromJson((*j)["y"])), tol) << "y";
  for (const auto& [wname, value] : (*j)["after"].items()) {
    for (const Weight& w : l.weights()) {
      if (w.name == wname) {
        EXPECT_LT(testing::MaxRelativeError(w.value, testing::TensorFromJson(value)), tol)
            << wname << " after the call";
      }
    }
  }
  const Tensor dout = testing::TensorFromJson((*j)["dout"]);
  std::vector<Tensor> din(1);
  l.Backward(args, out, {&dout}, {true}, &din, &s);
  EXPECT_LT(testing::MaxRelativeError(din[0], testing::TensorFromJson((*j)["dx"])), tol) << "dx";
  const json& dweights = (*j)["dweights"];
  for (const Weight& w : l.weights()) {
    if (!w.trainable) {
      EXPECT_FALSE(dweights.contains(w.name)) << w.name << " should be trainable";
      continue;
    }
    ASSERT_TRUE(dweights.contains(w.name)) << w.name << " should not be trainable";
    EXPECT_LT(testing::MaxRelativeError(w.grad, testing::TensorFromJson(dweights[w.name])), tol)
        << "d" << w.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvNormOracleTest,
    ::testing::Values("conv2d_stride2_same", "conv2d_dilation2_valid", "conv1d_causal",
                      "conv3d_same", "depthwise", "separable", "conv2d_transpose",
                      "conv2d_transpose_valid_output_padding", "maxpool2d_same", "avgpool2d_same",
                      "upsampling2d_bilinear", "batchnorm_training", "batchnorm_inference",
                      "batchnorm_frozen", "layernorm", "layernorm_two_axes"),
    [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace lockstep::trainer::graph
