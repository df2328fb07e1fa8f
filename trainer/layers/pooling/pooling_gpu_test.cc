// the pooling layers's CUDA ops against the CPU layers on fresh random inputs, for each storage
// dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs are poisoned (NaN)
// before each op so an unwritten element fails. Every test skips itself where no GPU is
// visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(PoolingCudaOps, SkippedWithoutCuda) {
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
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/gpu_op_testing.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/normalization/normalization_kernels.h"
#include "trainer/layers/pooling/pooling.h"
#include "trainer/layers/pooling/pooling_kernels.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/layers/rnn/rnn_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

TEST_F(GraphCudaOpsTest, PoolingMatchesTheCpuLayers) {
  struct Case {
    graph::PoolOptions o;
    Shape x;
  };
  auto pool = [](int rank, graph::PoolMode m, std::vector<int64_t> k, std::vector<int64_t> st,
                 graph::Padding p) {
    graph::PoolOptions o;
    o.rank = rank;
    o.mode = m;
    o.pool_size = std::move(k);
    o.strides = std::move(st);
    o.padding = p;
    return o;
  };
  using graph::Padding;
  using graph::PoolMode;
  const std::vector<Case> cases = {
      {pool(2, PoolMode::kMax, {2, 2}, {2, 2}, Padding::kValid), {3, 8, 9, 5}},
      {pool(2, PoolMode::kMax, {3, 3}, {2, 2}, Padding::kSame), {2, 9, 8, 6}},  // overlapping
      {pool(2, PoolMode::kAverage, {3, 3}, {2, 2}, Padding::kSame), {2, 9, 8, 6}},
      {pool(2, PoolMode::kAverage, {2, 3}, {1, 2}, Padding::kValid), {2, 7, 9, 3}},
      {pool(1, PoolMode::kMax, {3}, {1}, Padding::kSame), {4, 11, 7}},
      {pool(3, PoolMode::kAverage, {2, 2, 2}, {2, 2, 2}, Padding::kSame), {2, 5, 4, 3, 4}},
  };
  for (const Case& c : cases) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string what =
          graph::MakePooling("p", c.o)->class_name() + " " + ShapeString(c.x) + " " + DTypeName(t);
      auto layer = graph::MakePooling("p", c.o);
      std::mt19937_64 brng(1);
      ASSERT_TRUE(
          layer->Build({Shape(c.x.begin() + 1, c.x.end())}, graph::BuildContext{&brng}).ok());
      const Tensor x = Rounded(ctx_.get(), Random(c.x, -2.0f, 2.0f), t);
      cpu::ConvGeometry g;
      g.rank = c.o.rank;
      g.n = c.x[0];
      g.c_in = g.c_out = c.x.back();
      for (int a = 0; a < g.rank; ++a) {
        const auto i = static_cast<size_t>(a);
        const graph::AxisGeometry ax =
            graph::WindowAxis(c.x[i + 1], c.o.pool_size[i], c.o.strides[i], 1, c.o.padding);
        g.in[i] = c.x[i + 1];
        g.out[i] = ax.out;
        g.kernel[i] = c.o.pool_size[i];
        g.stride[i] = c.o.strides[i];
        g.dilation[i] = 1;
        g.pad_before[i] = ax.pad_before;
      }
      Shape out_shape{g.n};
      for (int a = 0; a < g.rank; ++a) out_shape.push_back(g.out[static_cast<size_t>(a)]);
      out_shape.push_back(g.c_in);
      const Tensor dy = Rounded(ctx_.get(), Random(out_shape, -1.0f, 1.0f), t);
      const LayerRun cpu = RunCpuLayer(*layer, x, dy, true);
      const PoolKind kind = c.o.mode == PoolMode::kMax ? PoolKind::kMax : PoolKind::kAverage;
      DeviceTensor dx_in, ddy, y, arg, dx;
      ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
      ASSERT_OK(y.Resize(ctx_.get(), out_shape, t));
      Poison(&y);
      ASSERT_OK(PoolForward(ctx_.get(), dx_in, g, kind, &y, &arg));
      ASSERT_OK(dx.Resize(ctx_.get(), c.x, t));
      Poison(&dx);
      ASSERT_OK(PoolBackward(ctx_.get(), ddy, g, kind, arg, &dx));
      Tensor got;
      ASSERT_OK(Download(ctx_.get(), y, &got));
      ASSERT_EQ(got.shape(), cpu.y.shape()) << what;
      EXPECT_LT(RelativeError(got, cpu.y), Tolerance(t)) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dx, cpu.dx), Tolerance(t)) << what << " dx";
    }
  }
  // Global pooling: [n, spatial..., c] -> [n, c].
  for (PoolMode m : {PoolMode::kMax, PoolMode::kAverage}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Shape shape{5, 6, 7, 33};
      auto layer = graph::MakeGlobalPooling("g", 2, m, false);
      std::mt19937_64 brng(1);
      ASSERT_TRUE(layer->Build({Shape{6, 7, 33}}, graph::BuildContext{&brng}).ok());
      const Tensor x = Rounded(ctx_.get(), Random(shape, -2.0f, 2.0f), t);
      const Tensor dy = Rounded(ctx_.get(), Random({5, 33}, -1.0f, 1.0f), t);
      const LayerRun cpu = RunCpuLayer(*layer, x, dy, true);
      const PoolKind kind = m == PoolMode::kMax ? PoolKind::kMax : PoolKind::kAverage;
      DeviceTensor dx_in, ddy, y, arg, dx;
      ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
      ASSERT_OK(GlobalPoolForward(ctx_.get(), dx_in, nullptr, 5, 42, 33, kind, &y, &arg));
      ASSERT_OK(GlobalPoolBackward(ctx_.get(), ddy, 5, 42, 33, kind, arg, &dx));
      Tensor got;
      EXPECT_LT(DeviceError(ctx_.get(), y, cpu.y), Tolerance(t)) << DTypeName(t) << " global y";
      ASSERT_OK(Download(ctx_.get(), dx, &got));
      EXPECT_LT(RelativeError(got.Reshaped(shape), cpu.dx), Tolerance(t))
          << DTypeName(t) << " global dx";
    }
  }
}

// The mask-making and mask-honouring kernels against the CPU layers: Masking (rows whose
// features all equal the value), a comparison in each dtype, and GlobalAveragePooling1D over a
// mask (an example with every step masked included).

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
