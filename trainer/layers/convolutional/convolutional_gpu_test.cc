// the convolutions and transposed convolutions's CUDA ops against the CPU layers on fresh random
// inputs, for each storage dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h).
// Outputs are poisoned (NaN) before each op so an unwritten element fails. Every test skips itself
// where no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(ConvolutionalCudaOps, SkippedWithoutCuda) {
  GTEST_SKIP() << lockstep::trainer::cuda::GpuCount().why_none;
}

#else

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "trainer/graph/activation.h"
#include "trainer/graph/loss.h"
#include "trainer/kernels/cuda/activation.h"
#include "trainer/kernels/cuda/device.h"
#include "trainer/kernels/cuda/dropout.h"
#include "trainer/kernels/cuda/keras_dense.h"
#include "trainer/kernels/cuda/loss.h"
#include "trainer/kernels/cuda/masking.h"
#include "trainer/kernels/cuda/merge.h"
#include "trainer/kernels/cuda/op_test_util.h"
#include "trainer/kernels/cuda/spatial.h"
#include "trainer/layers/attention/attention.h"
#include "trainer/layers/attention/attention_kernels.h"
#include "trainer/layers/convolutional/conv_nd_kernels.h"
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/gpu_op_testing.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/normalization/normalization_kernels.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/layers/rnn/rnn_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

TEST_F(GraphCudaOpsTest, ConvolutionsMatchTheCpuLayers) {
  using graph::Padding;
  struct Case {
    std::string what;
    Shape x;
    int64_t filters;  // depthwise: the multiplier
    bool depthwise;
    std::vector<int64_t> k, st, d;
    Padding p;
  };
  const std::vector<Case> cases = {
      {"3x3 same", {4, 16, 16, 8}, 16, false, {3, 3}, {1, 1}, {1, 1}, Padding::kSame},
      {"3x3 stride 2 same (odd padding)",
       {4, 16, 16, 8},
       8,
       false,
       {3, 3},
       {2, 2},
       {1, 1},
       Padding::kSame},
      {"1x1 stride 2", {2, 8, 8, 16}, 32, false, {1, 1}, {2, 2}, {1, 1}, Padding::kValid},
      {"5x3 stem", {2, 17, 13, 3}, 8, false, {5, 3}, {2, 1}, {1, 1}, Padding::kSame},
      {"dilated valid", {2, 15, 16, 5}, 6, false, {3, 3}, {1, 1}, {2, 3}, Padding::kValid},
      {"valid leftover", {2, 10, 9, 3}, 4, false, {3, 3}, {2, 2}, {1, 1}, Padding::kValid},
      {"conv1d causal", {4, 30, 6}, 7, false, {4}, {1}, {2}, Padding::kCausal},
      {"conv3d", {2, 6, 7, 5, 3}, 4, false, {3, 3, 2}, {1, 2, 1}, {1, 1, 1}, Padding::kSame},
      {"depthwise", {4, 16, 16, 24}, 1, true, {3, 3}, {1, 1}, {1, 1}, Padding::kSame},
      {"depthwise 5x5 stride 2 x2",
       {2, 15, 15, 8},
       2,
       true,
       {5, 5},
       {2, 2},
       {1, 1},
       Padding::kSame},
  };
  for (const Case& c : cases) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string what = c.what + " " + DTypeName(t);
      std::unique_ptr<graph::Layer> layer;
      if (c.depthwise) {
        graph::DepthwiseOptions o;
        o.rank = static_cast<int>(c.k.size());
        o.kernel_size = c.k;
        o.strides = c.st;
        o.dilation_rate = c.d;
        o.padding = c.p;
        o.depth_multiplier = c.filters;
        o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
        layer = graph::MakeDepthwiseConv("d", o);
      } else {
        graph::ConvOptions o;
        o.rank = static_cast<int>(c.k.size());
        o.filters = c.filters;
        o.kernel_size = c.k;
        o.strides = c.st;
        o.dilation_rate = c.d;
        o.padding = c.p;
        o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
        layer = graph::MakeConv("c", o);
      }
      std::mt19937_64 brng(1);
      ASSERT_TRUE(
          layer->Build({Shape(c.x.begin() + 1, c.x.end())}, graph::BuildContext{&brng}).ok());
      // The kernel rounded as the GPU's compute copy holds it.
      layer->weights()[0].value = Rounded(ctx_.get(), layer->weights()[0].value, t);
      const Tensor x = Rounded(ctx_.get(), Random(c.x, -1.0f, 1.0f), t);
      const int64_t c_out = c.depthwise ? c.x.back() * c.filters : c.filters;
      const cpu::ConvGeometry g = Geometry(c.x, c_out, c.depthwise, c.k, c.st, c.d, c.p);
      Shape out{g.n};
      for (int a = 0; a < g.rank; ++a) out.push_back(g.out[static_cast<size_t>(a)]);
      out.push_back(c_out);
      const Tensor dy = Rounded(ctx_.get(), Random(out, -1.0f, 1.0f), t);
      const LayerRun cpu = RunCpuLayer(*layer, x, dy, true);

      absl::StatusOr<std::unique_ptr<CudnnConv> > conv = CudnnConv::Make(ctx_.get(), g, t, true);
      ASSERT_TRUE(conv.ok()) << what << ": " << conv.status();
      DeviceTensor dx_in, ddy, w, b, y, dx, dw, db;
      ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
      ASSERT_OK(Upload(ctx_.get(), layer->weights()[0].value, t, &w));
      ASSERT_OK(Upload(ctx_.get(), layer->weights()[1].value, DType::kF32, &b));
      ASSERT_OK(y.Resize(ctx_.get(), out, t));
      Poison(&y);
      ASSERT_OK((*conv)->Forward(dx_in, w, b.as<float>(), &y));
      ASSERT_OK(dx.Resize(ctx_.get(), c.x, t));
      Poison(&dx);
      ASSERT_OK((*conv)->BackwardData(ddy, w, &dx));
      ASSERT_OK(dw.Resize(ctx_.get(), layer->weights()[0].value.shape(), DType::kF32));
      ASSERT_OK(db.Resize(ctx_.get(), {c_out}, DType::kF32));
      Poison(&dw);
      Poison(&db);
      ASSERT_OK((*conv)->BackwardWeights(dx_in, ddy, dw.as<float>(), db.as<float>()));
      EXPECT_LT(DeviceError(ctx_.get(), y, cpu.y), ConvTolerance(t)) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dx, cpu.dx), ConvTolerance(t)) << what << " dx";
      EXPECT_LT(DeviceError(ctx_.get(), dw, cpu.grads[0]), ConvTolerance(t)) << what << " dw";
      EXPECT_LT(DeviceError(ctx_.get(), db, cpu.grads[1]), ConvTolerance(t)) << what << " db";
    }
  }
}

// Every Keras loss in both forms, with label smoothing, against graph::ComputeLoss and
// graph::CountCorrect: the mean loss, the gradient, and the predictions judged right.

TEST_F(GraphCudaOpsTest, TransposedConvolutionsMatchTheCpuLayers) {
  using graph::Padding;
  struct Case {
    Shape x;
    int64_t filters;
    std::vector<int64_t> k, st;
    Padding p;
  };
  const std::vector<Case> cases = {
      {{2, 5, 6, 4}, 3, {3, 3}, {2, 2}, Padding::kSame},
      {{2, 5, 6, 4}, 3, {3, 3}, {2, 2}, Padding::kValid},
      {{3, 7, 5}, 6, {4}, {2}, Padding::kSame},
      {{2, 3, 4, 3, 2}, 2, {2, 2, 2}, {2, 2, 2}, Padding::kValid},
      {{2, 4, 4, 3}, 5, {3, 3}, {1, 1}, Padding::kSame},
  };
  for (const Case& c : cases) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string what = ShapeString(c.x) + " k" + ShapeString(c.k) + " s" +
                               ShapeString(c.st) + (c.p == Padding::kSame ? " same " : " valid ") +
                               DTypeName(t);
      graph::ConvTransposeOptions o;
      o.rank = static_cast<int>(c.k.size());
      o.filters = c.filters;
      o.kernel_size = c.k;
      o.strides = c.st;
      o.padding = c.p;
      o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
      auto layer = graph::MakeConvTranspose("t", o);
      std::mt19937_64 brng(1);
      auto built = layer->Build({Shape(c.x.begin() + 1, c.x.end())}, graph::BuildContext{&brng});
      ASSERT_TRUE(built.ok()) << what << ": " << built.status();
      layer->weights()[0].value = Rounded(ctx_.get(), layer->weights()[0].value, t);
      // The convolution this layer is the input gradient of: Keras's output lengths, and the
      // padding TensorFlow derives from them.
      cpu::ConvGeometry g;
      g.rank = o.rank;
      g.n = c.x[0];
      g.c_in = c.filters;
      g.c_out = c.x.back();
      Shape ys{c.x[0]};
      for (int a = 0; a < g.rank; ++a) {
        const auto i = static_cast<size_t>(a);
        const int64_t l = c.x[i + 1], k = c.k[i], st = c.st[i];
        const int64_t out = c.p == Padding::kSame ? l * st : l * st + std::max<int64_t>(k - st, 0);
        g.in[i] = out;
        g.out[i] = l;
        g.kernel[i] = k;
        g.stride[i] = st;
        g.dilation[i] = 1;
        g.pad_before[i] =
            c.p == Padding::kSame ? std::max<int64_t>((l - 1) * st + k - out, 0) / 2 : 0;
        ys.push_back(out);
      }
      ys.push_back(c.filters);
      ASSERT_EQ(Shape(ys.begin() + 1, ys.end()), (*built)[0]) << what;
      const Tensor x = Rounded(ctx_.get(), Random(c.x, -1.0f, 1.0f), t);
      const Tensor dy = Rounded(ctx_.get(), Random(ys, -1.0f, 1.0f), t);
      const LayerRun cpu = RunCpuLayer(*layer, x, dy, true);
      absl::StatusOr<std::unique_ptr<CudnnConvTranspose> > conv =
          CudnnConvTranspose::Make(ctx_.get(), g, t, true);
      ASSERT_TRUE(conv.ok()) << what << ": " << conv.status();
      DeviceTensor dx_in, ddy, w, b, y, dx, dw, db;
      ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
      ASSERT_OK(Upload(ctx_.get(), layer->weights()[0].value, t, &w));
      ASSERT_OK(Upload(ctx_.get(), layer->weights()[1].value, DType::kF32, &b));
      ASSERT_OK(dw.Resize(ctx_.get(), layer->weights()[0].value.shape(), DType::kF32));
      ASSERT_OK(db.Resize(ctx_.get(), {c.filters}, DType::kF32));
      ASSERT_OK(y.Resize(ctx_.get(), ys, t));
      ASSERT_OK(dx.Resize(ctx_.get(), c.x, t));
      for (DeviceTensor* p : {&dw, &db, &y, &dx}) Poison(p);
      ASSERT_OK((*conv)->Forward(dx_in, w, b.as<float>(), &y));
      ASSERT_OK((*conv)->BackwardData(ddy, w, &dx));
      ASSERT_OK((*conv)->BackwardWeights(dx_in, ddy, dw.as<float>(), db.as<float>()));
      EXPECT_LT(DeviceError(ctx_.get(), y, cpu.y), ConvTolerance(t)) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dx, cpu.dx), ConvTolerance(t)) << what << " dx";
      EXPECT_LT(DeviceError(ctx_.get(), dw, cpu.grads[0]), ConvTolerance(t)) << what << " dw";
      EXPECT_LT(DeviceError(ctx_.get(), db, cpu.grads[1]), ConvTolerance(t)) << what << " db";
    }
  }
}

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
