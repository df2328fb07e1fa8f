// the masking layers's CUDA ops against the CPU layers on fresh random inputs, for each storage
// dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs are poisoned (NaN)
// before each op so an unwritten element fails. Every test skips itself where no GPU is
// visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(MaskingCudaOps, SkippedWithoutCuda) {
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

TEST_F(GraphCudaOpsTest, MasksMatchTheCpuLayers) {
  const int64_t b = 4, t = 6, f = 37;
  std::vector<int64_t> padded = {0, 2, 5, 6};  // steps of padding at the end of each example
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor x = Rounded(ctx_.get(), Random({b, t, f}, -1.0f, 1.0f), dt);
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t s = t - padded[static_cast<size_t>(i)]; s < t; ++s) {
        for (int64_t j = 0; j < f; ++j) x[(i * t + s) * f + j] = 0.5f;
      }
    }
    x[(1 * t + 4) * f + 7] = 0.25f;  // one feature differs: that step is kept
    const Tensor dy = Rounded(ctx_.get(), Random({b, t, f}, -1.0f, 1.0f), dt);
    auto masking = graph::MakeMasking("m", 0.5f);
    std::mt19937_64 brng(1);
    ASSERT_TRUE(masking->Build({Shape{t, f}}, graph::BuildContext{&brng}).ok());
    std::mt19937_64 rng(3);
    std::vector<Tensor> out(1), din(1);
    graph::Saved saved;
    const graph::Args args{{&x}, {nullptr}};
    masking->Forward(args, &out, &saved, graph::CallContext{true, &rng});
    masking->Backward(args, out, {&dy}, {true}, &din, &saved);
    const Tensor* cpu_mask = masking->OutputMask(args, saved);
    ASSERT_NE(cpu_mask, nullptr);
    DeviceTensor dx_in, ddy, y, mask, dx;
    ASSERT_OK(Upload(ctx_.get(), x, dt, &dx_in));
    ASSERT_OK(Upload(ctx_.get(), dy, dt, &ddy));
    ASSERT_OK(MaskingForward(ctx_.get(), dx_in, 0.5f, &y, &mask));
    ASSERT_OK(MaskingBackward(ctx_.get(), ddy, mask, &dx));
    EXPECT_EQ(DeviceError(ctx_.get(), mask, *cpu_mask), 0.0) << DTypeName(dt) << " mask";
    EXPECT_EQ(DeviceError(ctx_.get(), y, out[0]), 0.0) << DTypeName(dt) << " Masking y";
    EXPECT_EQ(DeviceError(ctx_.get(), dx, din[0]), 0.0) << DTypeName(dt) << " Masking dx";

    // A comparison, into the input's dtype and into fp32.
    for (auto [op, name] : {std::pair{CompareOp::kNotEqual, "NotEqual"},
                            std::pair{CompareOp::kGreaterEqual, "GreaterEqual"}}) {
      auto cmp = graph::MakeCompare("c", name, op, 0.5f);
      ASSERT_TRUE(cmp->Build({Shape{t, f}}, graph::BuildContext{&brng}).ok());
      std::vector<Tensor> cout(1);
      graph::Saved cs;
      cmp->Forward(args, &cout, &cs, graph::CallContext{true, &rng});
      for (DType to : {dt, DType::kF32}) {
        DeviceTensor c;
        ASSERT_OK(CompareForward(ctx_.get(), dx_in, op, 0.5f, to, &c));
        EXPECT_EQ(c.dtype(), to);
        EXPECT_EQ(DeviceError(ctx_.get(), c, cout[0]), 0.0) << DTypeName(dt) << " " << name;
      }
    }

    // GlobalAveragePooling1D over the Masking layer's mask, and without one.
    auto gap = graph::MakeGlobalPooling("g", 1, graph::PoolMode::kAverage, false);
    ASSERT_TRUE(gap->Build({Shape{t, f}}, graph::BuildContext{&brng}).ok());
    const Tensor gdy = Rounded(ctx_.get(), Random({b, f}, -1.0f, 1.0f), dt);
    for (bool masked : {true, false}) {
      const LayerRun cpu = RunCpuLayer(*gap, x, gdy, true, masked ? cpu_mask : nullptr);
      DeviceTensor gy, gdx, saved_w, dgdy;
      ASSERT_OK(Upload(ctx_.get(), gdy, dt, &dgdy));
      ASSERT_OK(GlobalPoolForward(ctx_.get(), dx_in, masked ? &mask : nullptr, b, t, f,
                                  PoolKind::kAverage, &gy, &saved_w));
      ASSERT_OK(GlobalPoolBackward(ctx_.get(), dgdy, b, t, f, PoolKind::kAverage, saved_w, &gdx));
      const std::string what = std::string(DTypeName(dt)) + (masked ? " masked" : "");
      EXPECT_LT(DeviceError(ctx_.get(), gy, cpu.y), Tolerance(dt)) << what << " average y";
      EXPECT_LT(DeviceError(ctx_.get(), gdx, cpu.dx), Tolerance(dt)) << what << " average dx";
    }
  }
}

// The window geometry of a convolution layer's call, as the CPU layer computes it.
cpu::ConvGeometry Geometry(const Shape& x, int64_t c_out, bool depthwise,
                           const std::vector<int64_t>& k, const std::vector<int64_t>& st,
                           const std::vector<int64_t>& d, graph::Padding p) {
  cpu::ConvGeometry g;
  g.rank = static_cast<int>(k.size());
  g.n = x[0];
  g.c_in = x.back();
  g.c_out = c_out;
  g.depthwise = depthwise;
  for (int a = 0; a < g.rank; ++a) {
    const auto i = static_cast<size_t>(a);
    const graph::AxisGeometry ax = graph::WindowAxis(x[i + 1], k[i], st[i], d[i], p);
    g.in[i] = x[i + 1];
    g.out[i] = ax.out;
    g.kernel[i] = k[i];
    g.stride[i] = st[i];
    g.dilation[i] = d[i];
    g.pad_before[i] = ax.pad_before;
  }
  return g;
}

// cuDNN's convolutions against the CPU layers (oneDNN) for the geometries the oneDNN test
// covers: odd same padding (padded here), strides, 1x1, dilation, valid with inputs left over,
// causal 1D, 3D and depthwise multipliers; output with bias, input, kernel and bias gradients.

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
