// Pooling against finite differences and hand-computed cases, and the Keras configs of the
// window layers (the poolings and reshaping's padding, cropping and upsampling; PyTorch checks
// them in conv_test.cc's oracle cases).
#include "trainer/layers/pooling/pooling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "trainer/graph/testing/forward.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/keras/layer_factory.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::graph {
namespace {

using nlohmann::json;
using testing::CheckLayerGradients;
using testing::Forward1;
using testing::FromJson;
using testing::PerExample;
using testing::RandomTensor;

// Distinct values 0.05 apart in a shuffled order: no ties, and no two values of a window within
// the finite-difference step of each other, so max pooling has no kink near the input.
Tensor Distinct(const Shape& shape, uint64_t seed) {
  Tensor t(shape);
  std::vector<int64_t> order(static_cast<size_t>(t.size()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 g(seed);
  std::shuffle(order.begin(), order.end(), g);
  for (int64_t i = 0; i < t.size(); ++i) {
    t[i] = 0.05f * static_cast<float>(order[static_cast<size_t>(i)]) - 1.0f;
  }
  return t;
}

PoolOptions Pool(int rank, PoolMode mode, std::vector<int64_t> pool, std::vector<int64_t> strides,
                 Padding p) {
  PoolOptions o;
  o.rank = rank;
  o.mode = mode;
  o.pool_size = std::move(pool);
  o.strides = std::move(strides);
  o.padding = p;
  return o;
}

TEST(PoolingLayersTest, SamePaddingAtTheEndAndAveragesOverRealInputs) {
  // Max, pool 2, stride 2, same over 5 steps: 3 windows, the one pad after the end.
  auto mp = MakePooling("p", Pool(1, PoolMode::kMax, {2}, {2}, Padding::kSame));
  EXPECT_EQ(Forward1(*mp, Tensor({1, 5, 1}, {1, 5, 2, 4, 3})), Tensor({1, 3, 1}, {5, 4, 3}));
  // Average, pool 3, stride 1, same over 4 steps: one pad each side, and the edge windows
  // divide by their 2 real inputs.
  auto ap = MakePooling("p", Pool(1, PoolMode::kAverage, {3}, {1}, Padding::kSame));
  EXPECT_EQ(Forward1(*ap, Tensor({1, 4, 1}, {1, 2, 3, 4})), Tensor({1, 4, 1}, {1.5f, 2, 3, 3.5f}));
  // 2D, pool 2, stride 1, same over 2 x 2: the pad is after (bottom, right).
  auto ap2 = MakePooling("p", Pool(2, PoolMode::kAverage, {2, 2}, {1, 1}, Padding::kSame));
  EXPECT_EQ(Forward1(*ap2, Tensor({1, 2, 2, 1}, {1, 2, 3, 6})),
            Tensor({1, 2, 2, 1}, {3, 4, 4.5f, 6}));
  // Valid drops what does not fill a window; channels pool separately.
  auto mv = MakePooling("p", Pool(1, PoolMode::kMax, {2}, {2}, Padding::kValid));
  EXPECT_EQ(Forward1(*mv, Tensor({1, 5, 2}, {1, 9, 5, 8, 2, 7, 4, 6, 3, 5})),
            Tensor({1, 2, 2}, {5, 9, 4, 7}));
}

TEST(PoolingLayersTest, PoolingGradients) {
  struct Case {
    PoolOptions o;
    Shape x;
  };
  const std::vector<Case> cases = {
      {Pool(1, PoolMode::kMax, {2}, {2}, Padding::kValid), {2, 7, 3}},
      {Pool(1, PoolMode::kMax, {3}, {2}, Padding::kSame), {2, 8, 2}},
      {Pool(2, PoolMode::kMax, {2, 2}, {2, 2}, Padding::kValid), {2, 5, 4, 3}},
      {Pool(2, PoolMode::kMax, {3, 3}, {2, 1}, Padding::kSame), {2, 5, 4, 2}},
      {Pool(3, PoolMode::kMax, {2, 2, 2}, {1, 2, 2}, Padding::kSame), {1, 3, 4, 3, 2}},
      {Pool(1, PoolMode::kAverage, {3}, {1}, Padding::kSame), {2, 6, 2}},
      {Pool(2, PoolMode::kAverage, {2, 2}, {2, 2}, Padding::kValid), {2, 4, 5, 3}},
      {Pool(2, PoolMode::kAverage, {3, 2}, {2, 3}, Padding::kSame), {2, 5, 7, 2}},
      {Pool(3, PoolMode::kAverage, {2, 2, 2}, {2, 2, 2}, Padding::kSame), {1, 3, 3, 4, 2}},
  };
  testing::GradCheckOptions opts;
  opts.eps = 1e-3f;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto p = MakePooling("p", cases[i].o);
    EXPECT_EQ(CheckLayerGradients(*p, {Distinct(cases[i].x, i + 1)}, opts), "") << "case " << i;
  }
}

// Over the kernels' threads each example is pooled where it would be on one thread: the same
// outputs and gradients, bit for bit (a batch large enough that the work is split).
TEST(PoolingLayersTest, SplitOverThreadsEqualsOneThread) {
  std::mt19937_64 rng(1);
  for (const PoolOptions& o : {Pool(2, PoolMode::kMax, {3, 3}, {2, 2}, Padding::kSame),
                               Pool(2, PoolMode::kAverage, {3, 3}, {1, 1}, Padding::kSame)}) {
    const Tensor x = RandomTensor({16, 32, 32, 4}, 3);
    std::vector<std::vector<Tensor>> runs;
    for (int threads : {1, 2, 3}) {
      cpu::SetCpuThreads(threads);
      auto p = MakePooling("p", o);
      ASSERT_TRUE(p->Build({{32, 32, 4}}, BuildContext{&rng}).ok());
      std::vector<Tensor> y(1), dx(1);
      Saved s;
      const Args args{{&x}, {nullptr}};
      p->Forward(args, &y, &s, CallContext{true, &rng});
      const Tensor dy = RandomTensor(y[0].shape(), 4);
      p->Backward(args, y, {&dy}, {true}, &dx, &s);
      runs.push_back({y[0], dx[0]});
    }
    cpu::SetCpuThreads(1);
    for (size_t r = 1; r < runs.size(); ++r) {
      EXPECT_EQ(runs[r][0], runs[0][0]) << "forward, run " << r;
      EXPECT_EQ(runs[r][1], runs[0][1]) << "backward, run " << r;
    }
  }
}

TEST(PoolingLayersTest, GlobalPoolingAndTheMaskedAverage) {
  testing::GradCheckOptions opts;
  opts.eps = 1e-3f;
  for (int rank : {1, 2, 3}) {
    Shape shape{2};
    for (int a = 0; a < rank; ++a) shape.push_back(3);
    shape.push_back(4);
    for (PoolMode mode : {PoolMode::kMax, PoolMode::kAverage}) {
      for (bool keepdims : {false, true}) {
        auto g = MakeGlobalPooling("g", rank, mode, keepdims);
        EXPECT_EQ(CheckLayerGradients(*g, {Distinct(shape, 1)}, opts), "") << rank;
        std::mt19937_64 rng(1);
        auto out = g->Build({PerExample(Tensor(shape))}, BuildContext{&rng});
        ASSERT_TRUE(out.ok());
        Shape expect = keepdims ? Shape(static_cast<size_t>(rank), 1) : Shape{};
        expect.push_back(4);
        EXPECT_EQ((*out)[0], expect);
      }
    }
  }
  // GlobalAveragePooling1D averages the unmasked steps; all masked gives 0.
  auto g = MakeGlobalPooling("g", 1, PoolMode::kAverage, false);
  Tensor x({2, 3, 2}, {1, 10, 100, 100, 3, 30, 5, 6, 7, 8, 9, 10});
  Tensor mask({2, 3}, {1, 0, 1, 0, 0, 0});
  EXPECT_EQ(Forward1(*g, x, false, &mask), Tensor({2, 2}, {2, 20, 0, 0}));
  opts.masks = {&mask};
  EXPECT_EQ(CheckLayerGradients(*g, {RandomTensor({2, 3, 2}, 2)}, opts), "");
  std::vector<Tensor> y(1);
  Saved s;
  Args args{{&x}, {&mask}};
  g->Forward(args, &y, &s, CallContext{});
  EXPECT_EQ(g->OutputMask(args, s), nullptr);
}

TEST(PoolingLayersTest, TooSmallInputsAreRefusedOrReported) {
  std::mt19937_64 rng(1);
  auto p = MakePooling("p", Pool(1, PoolMode::kMax, {3}, {3}, Padding::kValid));
  EXPECT_EQ(p->Build({{2, 4}}, BuildContext{&rng}).status().message(),
            "layer 'p' (MaxPooling1D): input [2, 4] is smaller than pool_size [3]");
  ASSERT_TRUE(p->Build({{-1, 4}}, BuildContext{&rng}).ok());
  std::string error;
  const Tensor x = RandomTensor({1, 2, 4}, 1);
  std::vector<Tensor> y(1);
  Saved s;
  p->Forward(Args{{&x}, {nullptr}}, &y, &s, CallContext{false, &rng, &error});
  EXPECT_EQ(error, "layer 'p' (MaxPooling1D): input [1, 2, 4] is smaller than pool_size [3]");
  EXPECT_EQ(y[0].shape(), Shape({1, 0, 4}));
}

// ---- Factories from Keras configs.

Shape BuiltShape(Layer& l, const Shape& in) {
  std::mt19937_64 rng(1);
  auto out = l.Build({in}, BuildContext{&rng});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : Shape{};
}

TEST(PoolingFactoryTest, RealConfigsBuild) {
  struct Case {
    const char* json;
    bool keras3;
    Shape in, out;
  };
  const Case cases[] = {
      // Keras 2.0 MaxPooling2D (strides null: the pool size).
      {R"({"class_name": "MaxPooling2D", "config": {"name": "p", "trainable": true,
        "pool_size": [2, 2], "padding": "valid", "strides": null,
        "data_format": "channels_last"}})",
       false,
       {7, 6, 3},
       {3, 3, 3}},
      {R"({"class_name": "AveragePooling1D", "config": {"name": "p", "trainable": true,
        "dtype": "float32", "strides": [2], "pool_size": [3], "padding": "same",
        "data_format": "channels_last"}})",
       false,
       {9, 2},
       {5, 2}},
      {R"({"class_name": "MaxPooling3D", "config": {"name": "p", "trainable": true,
        "pool_size": [1, 2, 2], "padding": "valid", "strides": [1, 2, 2],
        "data_format": "channels_last"}})",
       false,
       {4, 6, 6, 2},
       {4, 3, 3, 2}},
      // 039-k3-embedding-gap1d.json.
      {R"({"module": "keras.layers", "class_name": "GlobalAveragePooling1D", "config": {
        "name": "global_average_pooling1d", "trainable": true, "dtype": {"module": "keras",
        "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null},
        "data_format": "channels_last", "keepdims": false}, "registered_name": null})",
       true,
       {20, 16},
       {16}},
      {R"({"class_name": "GlobalMaxPooling1D", "config": {"name": "g", "trainable": true,
        "data_format": "channels_last"}})",
       false,
       {20, 16},
       {16}},
      {R"({"class_name": "GlobalAveragePooling2D", "config": {"name": "g", "trainable": true,
        "dtype": "float32", "data_format": "channels_last", "keepdims": true}})",
       false,
       {5, 5, 8},
       {1, 1, 8}},
      // 017-modulation-cnn-zeropad.json and 041-k3-mobilenetv2-functional.json.
      {R"({"class_name": "ZeroPadding2D", "config": {"name": "zero_padding2d_9",
        "trainable": true, "batch_input_shape": [null, 256, 2, 1], "dtype": "float32",
        "padding": [[0, 0], [2, 2]], "data_format": "channels_last"}})",
       false,
       {256, 2, 1},
       {256, 6, 1}},
      {R"({"module": "keras.layers", "class_name": "ZeroPadding2D", "config": {
        "name": "block_1_pad", "trainable": true, "dtype": "float32",
        "padding": [[0, 1], [0, 1]], "data_format": "channels_last"}, "registered_name": null,
        "build_config": {"input_shape": [null, 112, 112, 96]}, "name": "block_1_pad"})",
       true,
       {112, 112, 96},
       {113, 113, 96}},
      {R"({"class_name": "ZeroPadding1D", "config": {"name": "z", "padding": [1, 3]}})",
       false,
       {5, 2},
       {9, 2}},
      {R"({"class_name": "ZeroPadding3D", "config": {"name": "z", "padding": 1}})",
       false,
       {2, 3, 4, 2},
       {4, 5, 6, 2}},
      {R"({"class_name": "Cropping2D", "config": {"name": "c", "trainable": true,
        "cropping": [[1, 1], [2, 0]], "data_format": "channels_last"}})",
       false,
       {6, 6, 3},
       {4, 4, 3}},
      {R"({"class_name": "Cropping1D", "config": {"name": "c", "cropping": [1, 2]}})",
       false,
       {6, 3},
       {3, 3}},
      // 031-conv-autoencoder-upsampling.json.
      {R"({"class_name": "UpSampling2D", "config": {"name": "up_sampling2d_14",
        "trainable": true, "dtype": "float32", "size": [2, 2], "data_format": "channels_last",
        "interpolation": "nearest"}})",
       false,
       {7, 7, 16},
       {14, 14, 16}},
      {R"({"class_name": "UpSampling1D", "config": {"name": "u", "size": 3}})",
       false,
       {4, 2},
       {12, 2}},
      {R"({"class_name": "UpSampling3D", "config": {"name": "u", "size": [1, 2, 2],
        "data_format": "channels_last"}})",
       false,
       {2, 3, 3, 1},
       {2, 6, 6, 1}},
  };
  for (const Case& c : cases) {
    auto l = FromJson(c.json, c.keras3);
    ASSERT_TRUE(l.ok()) << l.status() << c.json;
    EXPECT_EQ(BuiltShape(**l, c.in), c.out) << c.json;
  }
}

TEST(PoolingFactoryTest, RefusalsNameTheOption) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"class_name": "MaxPooling2D", "config": {"name": "p", "pool_size": 2,
        "data_format": "channels_first"}})",
       "layer 'p' (MaxPooling2D): option data_format=\"channels_first\" is not supported"},
      {R"({"class_name": "UpSampling2D", "config": {"name": "u", "size": 2,
        "interpolation": "bicubic"}})",
       "layer 'u' (UpSampling2D): option interpolation=\"bicubic\" is not supported"},
      {R"({"class_name": "AveragePooling2D", "config": {"name": "p", "padding": "full"}})",
       "layer 'p' (AveragePooling2D): option padding=\"full\" is not supported"},
      {R"({"class_name": "ZeroPadding2D", "config": {"name": "z", "padding": [1, 2, 3]}})",
       "layer 'z' (ZeroPadding2D): option padding=[1,2,3] is not an integer, 2 integers or 2 "
       "pairs"},
      {R"({"class_name": "GlobalMaxPooling2D", "config": {"name": "g", "mystery": true}})",
       "layer 'g' (GlobalMaxPooling2D): option mystery=true is not supported"},
  };
  for (const Case& c : cases) {
    auto l = FromJson(c.json);
    ASSERT_FALSE(l.ok()) << c.json;
    EXPECT_EQ(l.status().message(), c.message);
  }
}

}  // namespace
}  // namespace lockstep::trainer::graph
