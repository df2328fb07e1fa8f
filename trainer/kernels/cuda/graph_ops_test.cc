// The graph's CUDA ops (Dense, activations, dropout, convolutions, BatchNormalization,
// LayerNormalization, pooling, padding, cropping, upsampling, merges, concatenation, embedding,
// losses) against their CPU counterparts (trainer/graph/: the functions, or the layers
// themselves) on fresh random inputs, for each storage dtype, by the relative error
// ||gpu - cpu|| / ||cpu||: fp32 1e-5 (convolutions 1e-4), fp16 5e-3, bf16 3e-2 (16-bit inputs
// are rounded; the arithmetic stays fp32). Outputs are poisoned (NaN) before each op so an
// unwritten element fails. Every test skips itself where no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(GraphCudaOps, SkippedWithoutCuda) {
  GTEST_SKIP() << lockstep::trainer::cuda::GpuCount().why_none;
}

#else

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "trainer/graph/activation.h"
#include "trainer/graph/layers/conv.h"
#include "trainer/graph/layers/pooling.h"
#include "trainer/graph/loss.h"
#include "trainer/kernels/cuda/activation.h"
#include "trainer/kernels/cuda/conv_nd.h"
#include "trainer/kernels/cuda/device.h"
#include "trainer/kernels/cuda/dropout.h"
#include "trainer/kernels/cuda/keras_dense.h"
#include "trainer/kernels/cuda/loss.h"
#include "trainer/kernels/cuda/masking.h"
#include "trainer/kernels/cuda/merge.h"
#include "trainer/kernels/cuda/op_test_util.h"
#include "trainer/kernels/cuda/pooling.h"
#include "trainer/kernels/cuda/spatial.h"
#include "trainer/layers/attention/attention.h"
#include "trainer/layers/attention/attention_kernels.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/normalization/normalization_kernels.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/layers/rnn/rnn_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

// Convolutions: cuDNN may pick Winograd or FFT algorithms, whose fp32 results differ from a
// direct sum by more than rounding alone (1e-4 still catches any wrong index).
double ConvTolerance(DType t) { return t == DType::kF32 ? 1e-4 : Tolerance(t); }

class GraphCudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuCountResult n = GpuCount();
    if (n.count == 0) GTEST_SKIP() << n.why_none;
    absl::StatusOr<std::unique_ptr<GpuContext> > c = GpuContext::Create(0, {.tf32 = false});
    ASSERT_TRUE(c.ok()) << c.status();
    ctx_ = std::move(*c);
    rng_.seed(static_cast<uint32_t>(std::random_device{}()));
  }
  Tensor Random(Shape shape, float lo, float hi) {
    return cuda::Random(std::move(shape), &rng_, lo, hi);
  }
  void Poison(DeviceTensor* t) {
    ASSERT_EQ(cudaMemsetAsync(t->data(), 0xff, t->bytes(), ctx_->stream()), cudaSuccess);
  }

  std::unique_ptr<GpuContext> ctx_;
  std::mt19937 rng_;
};

// Every activation the loader accepts, with the alpha its layer or name gives it.
std::vector<Activation> AllActivations() {
  std::vector<Activation> out;
  for (Act k : {Act::kLinear, Act::kRelu, Act::kRelu6, Act::kSigmoid, Act::kHardSigmoid2,
                Act::kHardSigmoid3, Act::kTanh, Act::kSoftmax, Act::kSwish, Act::kGelu,
                Act::kGeluTanh, Act::kElu, Act::kSelu, Act::kSoftplus, Act::kSoftsign,
                Act::kExponential, Act::kLeakyRelu, Act::kHardSwish, Act::kMish}) {
    out.push_back({k, k == Act::kElu ? 1.0f : k == Act::kLeakyRelu ? 0.2f : 0.0f});
  }
  return out;
}

TEST_F(GraphCudaOpsTest, ActivationsMatchTheCpuForEveryKindAndDtype) {
  // Rows of 37 for softmax (more than a warp, not a multiple of one), values across the kinks
  // (0, +-3, 6) and into softplus's linear range.
  const Shape shape{29, 37};
  for (const Activation& a : AllActivations()) {
    const std::string name = graph::ActivationName(a) + "(" + std::to_string(int(a.kind)) + ")";
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Tensor z = Rounded(ctx_.get(), Random(shape, -8.0f, 8.0f), t);
      const Tensor dy = Rounded(ctx_.get(), Random(shape, -1.0f, 1.0f), t);
      Tensor y_cpu, dz_cpu;
      graph::ActivationForward(a, z, &y_cpu);
      graph::ActivationBackward(a, z, y_cpu, dy, &dz_cpu);
      DeviceTensor dz_in, dy_in, y_dev, dz_dev;
      ASSERT_OK(Upload(ctx_.get(), z, t, &dz_in));
      ASSERT_OK(Upload(ctx_.get(), dy, t, &dy_in));
      ASSERT_OK(y_dev.Resize(ctx_.get(), shape, t));
      Poison(&y_dev);
      ASSERT_OK(ActivationForward(ctx_.get(), a, dz_in, &y_dev));
      Tensor y_gpu;
      ASSERT_OK(Download(ctx_.get(), y_dev, &y_gpu));
      EXPECT_LT(RelativeError(y_gpu, y_cpu), Tolerance(t)) << name << " " << DTypeName(t);
      // The backward pass from the GPU's own forward output, as a layer would run it; its
      // reference from the CPU's output rounded the same way.
      const Tensor y_ref = Rounded(ctx_.get(), y_cpu, t);
      graph::ActivationBackward(a, z, y_ref, dy, &dz_cpu);
      DeviceTensor y_ref_dev;
      ASSERT_OK(Upload(ctx_.get(), y_ref, t, &y_ref_dev));
      ASSERT_OK(dz_dev.Resize(ctx_.get(), shape, t));
      Poison(&dz_dev);
      ASSERT_OK(ActivationBackward(ctx_.get(), a, dz_in, y_ref_dev, dy_in, &dz_dev));
      Tensor dz_gpu;
      ASSERT_OK(Download(ctx_.get(), dz_dev, &dz_gpu));
      EXPECT_LT(RelativeError(dz_gpu, dz_cpu), Tolerance(t)) << name << " " << DTypeName(t);
    }
  }
}

TEST_F(GraphCudaOpsTest, ActivationBackwardRefusesMismatchedTensors) {
  DeviceTensor z, y, dy, dz;
  ASSERT_OK(z.Resize(ctx_.get(), {4, 3}, DType::kF32));
  ASSERT_OK(y.Resize(ctx_.get(), {4, 2}, DType::kF32));
  ASSERT_OK(dy.Resize(ctx_.get(), {4, 3}, DType::kF32));
  const absl::Status st = ActivationBackward(ctx_.get(), {Act::kTanh, 0}, z, y, dy, &dz);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

// A CPU layer's forward and backward pass on x and dy: y, dx, then each weight's value after
// the call (moving statistics move in training) and gradient.
struct LayerRun {
  Tensor y, dx;
  std::vector<Tensor> values, grads;
};
// `mask`: the input's [batch, time] mask, or null.
LayerRun RunCpuLayer(graph::Layer& l, const Tensor& x, const Tensor& dy, bool training,
                     const Tensor* mask = nullptr) {
  std::mt19937_64 rng(3);
  std::vector<Tensor> out(1), din(1);
  graph::Saved s;
  l.Forward(graph::Args{{&x}, {mask}}, &out, &s, graph::CallContext{training, &rng});
  for (graph::Weight& w : l.weights()) w.grad.Fill(0.0f);
  l.Backward(graph::Args{{&x}, {mask}}, out, {&dy}, {true}, &din, &s);
  LayerRun r{out[0], din[0], {}, {}};
  for (const graph::Weight& w : l.weights()) {
    r.values.push_back(w.value);
    r.grads.push_back(w.grad);
  }
  return r;
}

TEST_F(GraphCudaOpsTest, BatchNormMatchesTheCpuLayerInTrainingAndInference) {
  // Rows from one chunk to many (4,096 rows); channels below, at and above a 32-channel tile.
  for (const Shape& shape : {Shape{6, 5, 7, 24}, Shape{64, 8, 8, 16}, Shape{3, 4, 45}}) {
    for (bool training : {true, false}) {
      for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
        const std::string what =
            ShapeString(shape) + (training ? " training " : " inference ") + DTypeName(t);
        const int64_t c = shape.back();
        graph::BatchNormOptions o;
        o.momentum = 0.9f;
        auto layer = graph::MakeBatchNormalization("bn", o);
        std::mt19937_64 brng(1);
        ASSERT_TRUE(
            layer->Build({Shape(shape.begin() + 1, shape.end())}, graph::BuildContext{&brng}).ok());
        // gamma, beta, moving mean, moving variance: random, the variance positive.
        for (size_t w = 0; w < 4; ++w) {
          layer->weights()[w].value = Random({c}, w == 3 ? 0.5f : -1.0f, w == 3 ? 2.0f : 1.0f);
        }
        std::vector<Tensor> before;
        for (const graph::Weight& w : layer->weights()) before.push_back(w.value);
        const Tensor x = Rounded(ctx_.get(), Random(shape, -3.0f, 5.0f), t);
        const Tensor dy = Rounded(ctx_.get(), Random(shape, -1.0f, 1.0f), t);
        const LayerRun cpu = RunCpuLayer(*layer, x, dy, training);

        std::vector<DeviceTensor> w(4);
        for (size_t i = 0; i < 4; ++i) ASSERT_OK(Upload(ctx_.get(), before[i], DType::kF32, &w[i]));
        DeviceTensor dx_in, ddy, y, dx, stats, grads;
        ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
        ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
        ASSERT_OK(stats.Resize(ctx_.get(), {2, c}, DType::kF32));
        ASSERT_OK(Upload(ctx_.get(), Tensor({2, c}, 0.0f), DType::kF32, &grads));
        ASSERT_OK(y.Resize(ctx_.get(), shape, t));
        Poison(&y);
        BatchNormParams p{.channels = c,
                          .epsilon = o.epsilon,
                          .momentum = o.momentum,
                          .batch_statistics = training};
        float* mean = stats.as<float>();
        float* rstd = mean + c;
        ASSERT_OK(BatchNormForward(ctx_.get(), dx_in, w[0].as<float>(), w[1].as<float>(), p,
                                   w[2].as<float>(), w[3].as<float>(), mean, rstd, &y));
        ASSERT_OK(dx.Resize(ctx_.get(), shape, t));
        Poison(&dx);
        ASSERT_OK(BatchNormBackward(ctx_.get(), dx_in, ddy, w[0].as<float>(), mean, rstd, p,
                                    grads.as<float>(), grads.as<float>() + c, &dx));
        Tensor got;
        EXPECT_LT(DeviceError(ctx_.get(), y, cpu.y), Tolerance(t)) << what << " y";
        EXPECT_LT(DeviceError(ctx_.get(), dx, cpu.dx), Tolerance(t)) << what << " dx";
        ASSERT_OK(Download(ctx_.get(), grads, &got));
        Tensor dgamma({c}), dbeta({c});
        std::copy_n(got.data(), c, dgamma.data());
        std::copy_n(got.data() + c, c, dbeta.data());
        EXPECT_LT(RelativeError(dgamma, cpu.grads[0]), Tolerance(t)) << what << " dgamma";
        EXPECT_LT(RelativeError(dbeta, cpu.grads[1]), Tolerance(t)) << what << " dbeta";
        for (size_t i = 2; i < 4; ++i) {
          EXPECT_LT(DeviceError(ctx_.get(), w[i], cpu.values[i]), Tolerance(t))
              << what << " moving " << i;
        }
      }
    }
  }
}

TEST_F(GraphCudaOpsTest, LayerNormMatchesTheCpuLayer) {
  // Groups below a warp, between, and of several hundred values.
  for (const Shape& shape : {Shape{12, 9, 20}, Shape{5, 7, 40}, Shape{4, 3, 300}}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string what = ShapeString(shape) + " " + DTypeName(t);
      const int64_t g = shape.back();
      auto layer = graph::MakeLayerNormalization("ln", graph::LayerNormOptions{});
      std::mt19937_64 brng(1);
      ASSERT_TRUE(
          layer->Build({Shape(shape.begin() + 1, shape.end())}, graph::BuildContext{&brng}).ok());
      layer->weights()[0].value = Random({g}, 0.5f, 1.5f);
      layer->weights()[1].value = Random({g}, -1.0f, 1.0f);
      const Tensor x = Rounded(ctx_.get(), Random(shape, -3.0f, 5.0f), t);
      const Tensor dy = Rounded(ctx_.get(), Random(shape, -1.0f, 1.0f), t);
      const LayerRun cpu = RunCpuLayer(*layer, x, dy, true);

      DeviceTensor gamma, beta, dx_in, ddy, y, dx, stats, grads;
      ASSERT_OK(Upload(ctx_.get(), layer->weights()[0].value, DType::kF32, &gamma));
      ASSERT_OK(Upload(ctx_.get(), layer->weights()[1].value, DType::kF32, &beta));
      ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
      const int64_t rows = x.size() / g;
      ASSERT_OK(stats.Resize(ctx_.get(), {2, rows}, DType::kF32));
      ASSERT_OK(Upload(ctx_.get(), Tensor({2, g}, 0.0f), DType::kF32, &grads));
      ASSERT_OK(y.Resize(ctx_.get(), shape, t));
      Poison(&y);
      float* mean = stats.as<float>();
      float* rstd = mean + rows;
      ASSERT_OK(LayerNormForward(ctx_.get(), dx_in, g, gamma.as<float>(), beta.as<float>(), 1e-3f,
                                 mean, rstd, &y));
      ASSERT_OK(dx.Resize(ctx_.get(), shape, t));
      Poison(&dx);
      ASSERT_OK(LayerNormBackward(ctx_.get(), dx_in, ddy, g, gamma.as<float>(), mean, rstd,
                                  grads.as<float>(), grads.as<float>() + g, &dx));
      Tensor got;
      EXPECT_LT(DeviceError(ctx_.get(), y, cpu.y), Tolerance(t)) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dx, cpu.dx), Tolerance(t)) << what << " dx";
      ASSERT_OK(Download(ctx_.get(), grads, &got));
      Tensor dgamma({g}), dbeta({g});
      std::copy_n(got.data(), g, dgamma.data());
      std::copy_n(got.data() + g, g, dbeta.data());
      EXPECT_LT(RelativeError(dgamma, cpu.grads[0]), Tolerance(t)) << what << " dgamma";
      EXPECT_LT(RelativeError(dbeta, cpu.grads[1]), Tolerance(t)) << what << " dbeta";
    }
  }
}

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
TEST_F(GraphCudaOpsTest, LossesMatchTheCpu) {
  struct Case {
    Loss l;
    int64_t classes;
  };
  const std::vector<Case> cases = {
      {{LossKind::kSparseCategoricalCrossentropy, false, 0, 1}, 37},
      {{LossKind::kSparseCategoricalCrossentropy, true, 0, 1}, 37},
      {{LossKind::kCategoricalCrossentropy, false, 0.1f, 1}, 10},
      {{LossKind::kCategoricalCrossentropy, true, 0.1f, 1}, 10},
      {{LossKind::kBinaryCrossentropy, false, 0, 1}, 1},
      {{LossKind::kBinaryCrossentropy, true, 0.2f, 1}, 3},
      {{LossKind::kMeanSquaredError, false, 0, 1}, 5},
      {{LossKind::kMeanAbsoluteError, false, 0, 1}, 5},
      {{LossKind::kHuber, false, 0, 0.5f}, 5},
  };
  const int64_t rows = 70;
  for (const Case& c : cases) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string what =
          graph::LossName(c.l) + (c.l.from_logits ? " logits " : " ") + DTypeName(t);
      const Shape shape{rows, c.classes};
      Tensor pred = Random(shape, -3.0f, 3.0f);
      const bool probs =
          !c.l.from_logits && (c.l.kind == LossKind::kCategoricalCrossentropy ||
                               c.l.kind == LossKind::kSparseCategoricalCrossentropy ||
                               c.l.kind == LossKind::kBinaryCrossentropy);
      if (probs) {
        Tensor p;
        graph::ActivationForward(
            {c.l.kind == LossKind::kBinaryCrossentropy ? Act::kSigmoid : Act::kSoftmax, 0}, pred,
            &p);
        pred = p;
      }
      pred = Rounded(ctx_.get(), pred, t);
      Tensor target;
      if (c.l.kind == LossKind::kSparseCategoricalCrossentropy) {
        target = Tensor({rows});
        for (int64_t r = 0; r < rows; ++r) target[r] = static_cast<float>(rng_() % c.classes);
      } else if (c.l.kind == LossKind::kCategoricalCrossentropy) {
        target = Tensor(shape, 0.0f);
        for (int64_t r = 0; r < rows; ++r) target[r * c.classes + rng_() % c.classes] = 1.0f;
      } else if (c.l.kind == LossKind::kBinaryCrossentropy) {
        target = Tensor(shape);
        for (int64_t i = 0; i < target.size(); ++i) target[i] = static_cast<float>(rng_() % 2);
      } else {
        target = Random(shape, -2.0f, 2.0f);
      }
      Tensor dcpu;
      absl::StatusOr<double> want = graph::ComputeLoss(c.l, pred, target, &dcpu);
      ASSERT_TRUE(want.ok()) << what << ": " << want.status();
      int64_t judged = 0;
      const int64_t right = graph::CountCorrect(c.l, pred, target, &judged);

      DeviceTensor dp, dt, dgrad;
      ASSERT_OK(Upload(ctx_.get(), pred, t, &dp));
      ASSERT_OK(Upload(ctx_.get(), target, DType::kF32, &dt));
      ASSERT_OK(dgrad.Resize(ctx_.get(), shape, t));
      Poison(&dgrad);
      absl::StatusOr<LossResult> got = ComputeLoss(ctx_.get(), c.l, dp, dt, &dgrad);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status();
      EXPECT_NEAR(got->loss, *want, 1e-5 * std::max(1.0, std::abs(*want))) << what;
      EXPECT_EQ(got->correct, right) << what;
      EXPECT_EQ(got->judged, judged) << what;
      Tensor g;
      ASSERT_OK(Download(ctx_.get(), dgrad, &g));
      EXPECT_LT(RelativeError(g, dcpu), Tolerance(t)) << what << " gradient";
    }
  }
  // A class id the output has no row for fails the step, as on the CPU.
  DeviceTensor dp, dt;
  ASSERT_OK(Upload(ctx_.get(), Random({4, 3}, 0.1f, 1.0f), DType::kF32, &dp));
  ASSERT_OK(Upload(ctx_.get(), Tensor({4}, {0, 1, 3, 2}), DType::kF32, &dt));
  absl::StatusOr<LossResult> bad = ComputeLoss(
      ctx_.get(), {LossKind::kSparseCategoricalCrossentropy, false, 0, 1}, dp, dt, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("1 of 4 rows have a class id outside [0, 3)"),
            std::string::npos)
      << bad.status();
}

// A CPU layer of several inputs: y and each input's gradient.
std::vector<Tensor> RunCpuMulti(graph::Layer& l, const std::vector<Tensor>& x, const Tensor& dy) {
  std::mt19937_64 rng(3);
  std::vector<Shape> shapes;
  std::vector<const Tensor*> in;
  for (const Tensor& t : x) {
    shapes.push_back(Shape(t.shape().begin() + 1, t.shape().end()));
    in.push_back(&t);
  }
  EXPECT_TRUE(l.Build(shapes, graph::BuildContext{&rng}).ok());
  std::vector<Tensor> out(1), din(x.size());
  graph::Saved s;
  const graph::Args args{in, std::vector<const Tensor*>(x.size(), nullptr)};
  l.Forward(args, &out, &s, graph::CallContext{true, &rng});
  l.Backward(args, out, {&dy}, std::vector<bool>(x.size(), true), &din, &s);
  std::vector<Tensor> r{out[0]};
  for (Tensor& d : din) r.push_back(d);
  return r;
}

TEST_F(GraphCudaOpsTest, MergesAndConcatenationMatchTheCpuLayers) {
  struct Case {
    const char* cls;
    MergeOp op;
    std::vector<Shape> x;
  };
  // Squeeze-and-excitation's [n, 1, 1, c] against [n, h, w, c], three-way merges, and a tie
  // that Maximum must give to the first input (x0 == x1 where both are the largest).
  const std::vector<Case> cases = {
      {"Add", MergeOp::kAdd, {{4, 5, 6, 8}, {4, 5, 6, 8}, {4, 5, 6, 8}}},
      {"Multiply", MergeOp::kMultiply, {{4, 5, 6, 8}, {4, 1, 1, 8}}},
      {"Multiply", MergeOp::kMultiply, {{3, 7, 9}, {3, 7, 9}, {3, 1, 9}}},
      {"Subtract", MergeOp::kSubtract, {{6, 10}, {6, 10}}},
      {"Average", MergeOp::kAverage, {{6, 10}, {6, 10}, {6, 10}}},
      {"Maximum", MergeOp::kMaximum, {{5, 12}, {5, 12}, {5, 1}}},
      {"Minimum", MergeOp::kMinimum, {{5, 12}, {5, 12}}},
  };
  for (const Case& c : cases) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string what = std::string(c.cls) + " " + ShapeString(c.x[1]) + " " + DTypeName(t);
      std::vector<Tensor> x;
      for (const Shape& s : c.x) x.push_back(Rounded(ctx_.get(), Random(s, -2.0f, 2.0f), t));
      if (c.op == MergeOp::kMaximum) {
        for (int64_t i = 0; i < x[0].size(); i += 3) x[1][i] = x[0][i] = 5.0f;  // ties
      }
      auto layer = graph::MakeMerge("m", c.cls, c.op);
      const Tensor dy = Rounded(ctx_.get(), Random(c.x[0], -1.0f, 1.0f), t);
      const std::vector<Tensor> cpu = RunCpuMulti(*layer, x, dy);
      std::vector<DeviceTensor> dxs(x.size()), dgs(x.size());
      std::vector<const DeviceTensor*> in;
      std::vector<DeviceTensor*> grads;
      for (size_t k = 0; k < x.size(); ++k) {
        ASSERT_OK(Upload(ctx_.get(), x[k], t, &dxs[k]));
        in.push_back(&dxs[k]);
        grads.push_back(&dgs[k]);
      }
      DeviceTensor y, ddy;
      ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
      ASSERT_OK(y.Resize(ctx_.get(), c.x[0], t));
      Poison(&y);
      for (size_t k = 0; k < x.size(); ++k) {
        ASSERT_OK(dgs[k].Resize(ctx_.get(), c.x[k], t));
        Poison(&dgs[k]);
      }
      ASSERT_OK(MergeForward(ctx_.get(), c.op, in, &y));
      ASSERT_OK(MergeBackward(ctx_.get(), c.op, in, y, ddy, grads));
      Tensor got;
      EXPECT_LT(DeviceError(ctx_.get(), y, cpu[0]), Tolerance(t)) << what << " y";
      for (size_t k = 0; k < x.size(); ++k) {
        ASSERT_OK(Download(ctx_.get(), dgs[k], &got));
        ASSERT_EQ(got.shape(), cpu[k + 1].shape()) << what << " dx" << k;
        EXPECT_LT(RelativeError(got, cpu[k + 1]), Tolerance(t)) << what << " dx" << k;
      }
    }
  }
  // Concatenation on the last axis and on a middle one, three inputs of different lengths.
  for (int axis : {3, 1}) {
    std::vector<Shape> shapes = {{2, 3, 4, 5}, {2, 3, 4, 7}, {2, 3, 4, 2}};
    if (axis == 1) shapes = {{2, 3, 4, 5}, {2, 1, 4, 5}, {2, 6, 4, 5}};
    std::vector<Tensor> x;
    for (const Shape& s : shapes) x.push_back(Random(s, -2.0f, 2.0f));
    auto layer = graph::MakeConcatenate("c", axis);
    Shape out = shapes[0];
    out[static_cast<size_t>(axis)] = 0;
    for (const Shape& s : shapes) out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    const Tensor dy = Random(out, -1.0f, 1.0f);
    const std::vector<Tensor> cpu = RunCpuMulti(*layer, x, dy);
    std::vector<DeviceTensor> dxs(x.size()), dgs(x.size());
    std::vector<const DeviceTensor*> in;
    std::vector<DeviceTensor*> grads;
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_OK(Upload(ctx_.get(), x[k], DType::kF32, &dxs[k]));
      in.push_back(&dxs[k]);
      grads.push_back(&dgs[k]);
    }
    DeviceTensor y, ddy;
    ASSERT_OK(Upload(ctx_.get(), dy, DType::kF32, &ddy));
    ASSERT_OK(y.Resize(ctx_.get(), out, DType::kF32));
    Poison(&y);
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_OK(dgs[k].Resize(ctx_.get(), shapes[k], DType::kF32));
      Poison(&dgs[k]);
    }
    ASSERT_OK(ConcatForward(ctx_.get(), in, axis, &y));
    ASSERT_OK(ConcatBackward(ctx_.get(), ddy, in, axis, grads));
    Tensor got;
    ASSERT_OK(Download(ctx_.get(), y, &got));
    EXPECT_EQ(got, cpu[0]) << "axis " << axis;
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_OK(Download(ctx_.get(), dgs[k], &got));
      EXPECT_EQ(got, cpu[k + 1]) << "axis " << axis << " dx" << k;
    }
  }
}

TEST_F(GraphCudaOpsTest, EmbeddingMatchesTheCpuLayer) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    graph::EmbeddingOptions o;
    o.input_dim = 50;
    o.output_dim = 16;
    auto layer = graph::MakeEmbedding("e", o);
    // Ids with many repeats (each id's gradient sums several rows) and some padding zeros.
    Tensor ids({8, 12});
    for (int64_t i = 0; i < ids.size(); ++i) {
      ids[i] = i % 5 == 0 ? 0.0f : static_cast<float>(rng_() % 50);
    }
    const Tensor dy = Rounded(ctx_.get(), Random({8, 12, 16}, -1.0f, 1.0f), t);
    std::mt19937_64 brng(1);
    ASSERT_TRUE(layer->Build({Shape{12}}, graph::BuildContext{&brng}).ok());
    layer->weights()[0].value = Rounded(ctx_.get(), layer->weights()[0].value, t);
    const LayerRun cpu = RunCpuLayer(*layer, ids, dy, true);
    DeviceTensor did, table, ddy, y, dtable, bad;
    ASSERT_OK(Upload(ctx_.get(), ids, DType::kF32, &did));
    ASSERT_OK(Upload(ctx_.get(), layer->weights()[0].value, t, &table));
    ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
    ASSERT_OK(Upload(ctx_.get(), Tensor({50, 16}, 0.0f), DType::kF32, &dtable));
    ASSERT_OK(Upload(ctx_.get(), Tensor({1}, 0.0f), DType::kF32, &bad));  // an int 0
    ASSERT_OK(y.Resize(ctx_.get(), {8, 12, 16}, t));
    Poison(&y);
    ASSERT_OK(EmbeddingForward(ctx_.get(), did, table, &y, bad.as<int>()));
    ASSERT_OK(EmbeddingBackward(ctx_.get(), did, ddy, 50, dtable.as<float>()));
    Tensor got;
    EXPECT_LT(DeviceError(ctx_.get(), y, cpu.y), Tolerance(t)) << DTypeName(t) << " y";
    EXPECT_LT(DeviceError(ctx_.get(), dtable, cpu.grads[0]), Tolerance(t))
        << DTypeName(t) << " dtable";
    // Ids outside the table read zeros and are counted.
    ASSERT_OK(Upload(ctx_.get(), Tensor({3}, {1, 50, -1}), DType::kF32, &did));
    ASSERT_OK(EmbeddingForward(ctx_.get(), did, table, &y, bad.as<int>()));
    ASSERT_OK(Download(ctx_.get(), y, &got));
    for (int64_t j = 16; j < 48; ++j) EXPECT_EQ(got[j], 0.0f) << j;
    int count = 0;
    ASSERT_EQ(cudaMemcpy(&count, bad.data(), sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(count, 2);
  }
}

TEST_F(GraphCudaOpsTest, PaddingCroppingAndUpsamplingMatchTheCpuLayers) {
  struct Case {
    std::string what;
    std::function<std::unique_ptr<graph::Layer>()> make;
    Shape x;
    // The GPU's forward and backward for this case.
    std::function<absl::Status(GpuContext*, const DeviceTensor&, DeviceTensor*)> fwd;
    std::function<absl::Status(GpuContext*, const DeviceTensor&, DeviceTensor*)> bwd;
  };
  const std::vector<Case> cases = {
      {"ZeroPadding2D ((1, 2), (0, 3))",
       [] {
         return graph::MakeZeroPadding("z", 2, {{1, 2}, {0, 3}});
       },
       {2, 5, 4, 3},
       [](GpuContext* c, const DeviceTensor& x, DeviceTensor* y) {
         return PadOrCrop(c, x, 2, {1, 0, 0}, {2, 3, 0}, y);
       },
       [](GpuContext* c, const DeviceTensor& dy, DeviceTensor* dx) {
         return PadOrCrop(c, dy, 2, {-1, 0, 0}, {-2, -3, 0}, dx);
       }},
      {"Cropping1D (2, 1)",
       [] {
         return graph::MakeCropping("c", 1, {{2, 1}});
       },
       {3, 9, 4},
       [](GpuContext* c, const DeviceTensor& x, DeviceTensor* y) {
         return PadOrCrop(c, x, 1, {-2, 0, 0}, {-1, 0, 0}, y);
       },
       [](GpuContext* c, const DeviceTensor& dy, DeviceTensor* dx) {
         return PadOrCrop(c, dy, 1, {2, 0, 0}, {1, 0, 0}, dx);
       }},
      {"Cropping3D",
       [] {
         return graph::MakeCropping("c", 3, {{1, 0}, {0, 1}, {1, 1}});
       },
       {2, 4, 5, 6, 2},
       [](GpuContext* c, const DeviceTensor& x, DeviceTensor* y) {
         return PadOrCrop(c, x, 3, {-1, 0, -1}, {0, -1, -1}, y);
       },
       [](GpuContext* c, const DeviceTensor& dy, DeviceTensor* dx) {
         return PadOrCrop(c, dy, 3, {1, 0, 1}, {0, 1, 1}, dx);
       }},
      {"UpSampling2D nearest (2, 3)",
       [] {
         return graph::MakeUpSampling("u", 2, {2, 3}, graph::Interpolation::kNearest);
       },
       {2, 4, 5, 3},
       [](GpuContext* c, const DeviceTensor& x, DeviceTensor* y) {
         return UpsampleNearest(c, x, 2, {2, 3, 1}, y);
       },
       [](GpuContext* c, const DeviceTensor& dy, DeviceTensor* dx) {
         return UpsampleNearestBackward(c, dy, 2, {2, 3, 1}, dx);
       }},
      {"UpSampling1D nearest 3",
       [] { return graph::MakeUpSampling("u", 1, {3}, graph::Interpolation::kNearest); },
       {2, 7, 4},
       [](GpuContext* c, const DeviceTensor& x, DeviceTensor* y) {
         return UpsampleNearest(c, x, 1, {3, 1, 1}, y);
       },
       [](GpuContext* c, const DeviceTensor& dy, DeviceTensor* dx) {
         return UpsampleNearestBackward(c, dy, 1, {3, 1, 1}, dx);
       }},
      {"UpSampling2D bilinear (2, 3)",
       [] {
         return graph::MakeUpSampling("u", 2, {2, 3}, graph::Interpolation::kBilinear);
       },
       {2, 5, 4, 3},
       [](GpuContext* c, const DeviceTensor& x, DeviceTensor* y) {
         return UpsampleBilinear2d(c, x, 10, 12, y);
       },
       [](GpuContext* c, const DeviceTensor& dy, DeviceTensor* dx) {
         return UpsampleBilinear2dBackward(c, dy, 5, 4, dx);
       }},
  };
  for (const Case& c : cases) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string what = c.what + " " + DTypeName(t);
      auto layer = c.make();
      std::mt19937_64 brng(1);
      auto out = layer->Build({Shape(c.x.begin() + 1, c.x.end())}, graph::BuildContext{&brng});
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      Shape ys{c.x[0]};
      ys.insert(ys.end(), (*out)[0].begin(), (*out)[0].end());
      const Tensor x = Rounded(ctx_.get(), Random(c.x, -2.0f, 2.0f), t);
      const Tensor dy = Rounded(ctx_.get(), Random(ys, -1.0f, 1.0f), t);
      const LayerRun cpu = RunCpuLayer(*layer, x, dy, true);
      DeviceTensor dx_in, ddy, y, dx;
      ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
      ASSERT_OK(y.Resize(ctx_.get(), ys, t));
      ASSERT_OK(dx.Resize(ctx_.get(), c.x, t));
      Poison(&y);
      Poison(&dx);
      ASSERT_OK(c.fwd(ctx_.get(), dx_in, &y));
      ASSERT_OK(c.bwd(ctx_.get(), ddy, &dx));
      Tensor got;
      ASSERT_OK(Download(ctx_.get(), y, &got));
      ASSERT_EQ(got.shape(), cpu.y.shape()) << what;
      EXPECT_LT(RelativeError(got, cpu.y), Tolerance(t)) << what << " y";
      ASSERT_OK(Download(ctx_.get(), dx, &got));
      ASSERT_EQ(got.shape(), cpu.dx.shape()) << what;
      EXPECT_LT(RelativeError(got, cpu.dx), Tolerance(t)) << what << " dx";
    }
  }
}

// Dropout's draws are the GPU's own (counter-based), so it is checked by its distribution and
// by its contract: the backward pass drops exactly what the forward pass dropped, a seed
// repeats, another seed differs, and a noise shape shares draws along its broadcast axes.
TEST_F(GraphCudaOpsTest, DropoutKeepsOneMinusRateAndItsGradientFollowsTheMask) {
  const Shape shape{64, 1000};
  const float rate = 0.3f;
  DeviceTensor ones, y, dx, again, other;
  ASSERT_OK(Upload(ctx_.get(), Tensor(shape, 1.0f), DType::kF32, &ones));
  ASSERT_OK(DropoutForward(ctx_.get(), ones, rate, {}, 7, &y));
  ASSERT_OK(DropoutBackward(ctx_.get(), ones, rate, {}, 7, &dx));
  ASSERT_OK(DropoutForward(ctx_.get(), ones, rate, {}, 7, &again));
  ASSERT_OK(DropoutForward(ctx_.get(), ones, rate, {}, 8, &other));
  Tensor hy, hdx, hagain, hother;
  ASSERT_OK(Download(ctx_.get(), y, &hy));
  ASSERT_OK(Download(ctx_.get(), dx, &hdx));
  ASSERT_OK(Download(ctx_.get(), again, &hagain));
  ASSERT_OK(Download(ctx_.get(), other, &hother));
  int64_t dropped = 0, differ = 0;
  for (int64_t i = 0; i < hy.size(); ++i) {
    if (hy[i] == 0.0f) {
      ++dropped;
    } else {
      ASSERT_NEAR(hy[i], 1.0f / (1.0f - rate), 1e-6f) << i;
    }
    ASSERT_EQ(hdx[i], hy[i]) << i;
    ASSERT_EQ(hagain[i], hy[i]) << i;
    differ += hother[i] != hy[i];
  }
  const double n = static_cast<double>(hy.size());
  const double sigma = std::sqrt(rate * (1 - rate) / n);
  EXPECT_NEAR(static_cast<double>(dropped) / n, rate, 5 * sigma);
  EXPECT_GT(differ, hy.size() / 4);  // another seed, another mask
  // noise_shape [64, 1]: each row is dropped or kept whole.
  ASSERT_OK(DropoutForward(ctx_.get(), ones, rate, {64, 1}, 9, &y));
  ASSERT_OK(Download(ctx_.get(), y, &hy));
  int64_t rows_dropped = 0;
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t j = 1; j < 1000; ++j) ASSERT_EQ(hy[r * 1000 + j], hy[r * 1000]) << r;
    rows_dropped += hy[r * 1000] == 0.0f;
  }
  EXPECT_GT(rows_dropped, 0);
  EXPECT_LT(rows_dropped, 64);
  EXPECT_FALSE(DropoutForward(ctx_.get(), ones, 1.0f, {}, 1, &y).ok());
  // GaussianNoise: the added noise has mean 0 and the standard deviation asked for.
  ASSERT_OK(GaussianNoise(ctx_.get(), ones, 0.5f, 3, &y));
  ASSERT_OK(Download(ctx_.get(), y, &hy));
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < hy.size(); ++i) {
    const double e = hy[i] - 1.0;
    sum += e;
    sq += e * e;
  }
  EXPECT_NEAR(sum / n, 0.0, 5 * 0.5 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(sq / n), 0.5, 0.01);
}

// Dense's linear part on Keras's [in, units] kernel, over the last axis of a rank-3 input.
TEST_F(GraphCudaOpsTest, DenseMatchesTheCpuLayer) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    graph::DenseOptions o;
    o.units = 19;
    o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
    auto layer = graph::MakeDense("d", o);
    const Shape shape{6, 7, 33};
    std::mt19937_64 brng(1);
    ASSERT_TRUE(layer->Build({Shape{7, 33}}, graph::BuildContext{&brng}).ok());
    layer->weights()[0].value = Rounded(ctx_.get(), layer->weights()[0].value, t);
    const Tensor x = Rounded(ctx_.get(), Random(shape, -1.0f, 1.0f), t);
    const Tensor dy = Rounded(ctx_.get(), Random({6, 7, 19}, -1.0f, 1.0f), t);
    const LayerRun cpu = RunCpuLayer(*layer, x, dy, true);
    DeviceTensor dx_in, k, b, ddy, y, dx, dk, db;
    ASSERT_OK(Upload(ctx_.get(), x, t, &dx_in));
    ASSERT_OK(Upload(ctx_.get(), layer->weights()[0].value, t, &k));
    ASSERT_OK(Upload(ctx_.get(), layer->weights()[1].value, DType::kF32, &b));
    ASSERT_OK(Upload(ctx_.get(), dy, t, &ddy));
    ASSERT_OK(dk.Resize(ctx_.get(), {33, 19}, DType::kF32));
    ASSERT_OK(db.Resize(ctx_.get(), {19}, DType::kF32));
    ASSERT_OK(y.Resize(ctx_.get(), {6, 7, 19}, t));
    ASSERT_OK(dx.Resize(ctx_.get(), shape, t));
    for (DeviceTensor* p : {&dk, &db, &y, &dx}) Poison(p);
    ASSERT_OK(KerasDenseForward(ctx_.get(), dx_in, k, b.as<float>(), &y));
    ASSERT_OK(KerasDenseBackward(ctx_.get(), dx_in, k, ddy, &dx, dk.as<float>(), db.as<float>()));
    EXPECT_LT(DeviceError(ctx_.get(), y, cpu.y), Tolerance(t)) << DTypeName(t) << " y";
    EXPECT_LT(DeviceError(ctx_.get(), dx, cpu.dx), Tolerance(t)) << DTypeName(t) << " dx";
    EXPECT_LT(DeviceError(ctx_.get(), dk, cpu.grads[0]), Tolerance(t))
        << DTypeName(t) << " dkernel";
    EXPECT_LT(DeviceError(ctx_.get(), db, cpu.grads[1]), Tolerance(t)) << DTypeName(t) << " dbias";
  }
}

// SimpleRNN, LSTM and GRU (reset_after both ways) against the CPU layer: outputs, input
// gradients and every weight gradient, over sequences and last outputs, go_backwards, and
// activations other than the defaults (hard_sigmoid, relu); 16-bit inputs and outputs with
// fp32 cells.
TEST_F(GraphCudaOpsTest, RecurrentLayersMatchTheCpuLayer) {
  struct Case {
    RnnCell cell;
    bool reset_after, sequences, backwards;
    Act act, recurrent;
  };
  const std::vector<Case> cases = {
      {RnnCell::kSimpleRnn, true, true, false, Act::kTanh, Act::kSigmoid},
      {RnnCell::kSimpleRnn, true, false, true, Act::kRelu, Act::kSigmoid},
      {RnnCell::kLstm, true, false, false, Act::kTanh, Act::kSigmoid},
      {RnnCell::kLstm, true, true, true, Act::kTanh, Act::kHardSigmoid2},
      {RnnCell::kGru, true, true, false, Act::kTanh, Act::kSigmoid},
      {RnnCell::kGru, true, false, true, Act::kTanh, Act::kHardSigmoid3},
      {RnnCell::kGru, false, true, true, Act::kTanh, Act::kSigmoid},
      {RnnCell::kGru, false, false, false, Act::kTanh, Act::kHardSigmoid2},
  };
  const int64_t b = 5, t = 7, d = 6, u = 9;
  // A padding mask: rows of 7, 4, 1 and 0 real steps (then padding), and one with gaps.
  const Tensor mask({b, t}, {1, 1, 1, 1, 1, 1, 1,  //
                             1, 1, 1, 1, 0, 0, 0,  //
                             1, 0, 0, 0, 0, 0, 0,  //
                             0, 0, 0, 0, 0, 0, 0,  //
                             0, 1, 1, 0, 1, 0, 1});
  for (const Case& c : cases) {
    for (int variant = 0; variant < 4; ++variant) {
      // 0: no mask; 1: masked, masked steps repeat the last output; 2: they output zeros;
      // 3: masked, with initial states in and the final states out (return_state).
      const bool masked = variant > 0, states = variant == 3;
      const DType dt = variant == 1 ? DType::kBF16 : DType::kF32;
      const std::string what =
          std::string(graph::RnnClassName(c.cell)) + (c.reset_after ? "" : " reset_before") +
          (c.sequences ? " sequences" : " last") + (c.backwards ? " backwards " : " ") +
          DTypeName(dt) + (masked ? variant == 2 ? " masked, zeros" : " masked" : "") +
          (states ? ", states" : "");
      graph::RnnOptions o;
      o.zero_output_for_mask = variant == 2;
      o.return_state = states;
      o.units = u;
      o.activation = {c.act, 0};
      o.recurrent_activation = {c.recurrent, 0};
      o.return_sequences = c.sequences;
      o.go_backwards = c.backwards;
      o.reset_after = c.reset_after;
      o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
      auto layer = graph::MakeRnn("rnn", c.cell, o);
      const size_t n_states = !states ? 0 : c.cell == RnnCell::kLstm ? 2 : 1;
      std::vector<Shape> in_shapes{Shape{t, d}};
      for (size_t k = 0; k < n_states; ++k) in_shapes.push_back(Shape{u});
      std::mt19937_64 brng(1);
      ASSERT_TRUE(layer->Build(in_shapes, graph::BuildContext{&brng}).ok()) << what;
      const Tensor x = Rounded(ctx_.get(), Random({b, t, d}, -1.0f, 1.0f), dt);
      const Shape ys = c.sequences ? Shape{b, t, u} : Shape{b, u};
      const Tensor dy = Rounded(ctx_.get(), Random(ys, -1.0f, 1.0f), dt);
      // Initial states and the final states' gradients.
      std::vector<Tensor> s0, ds;
      for (size_t k = 0; k < n_states; ++k) {
        s0.push_back(Rounded(ctx_.get(), Random({b, u}, -1.0f, 1.0f), dt));
        ds.push_back(Rounded(ctx_.get(), Random({b, u}, -1.0f, 1.0f), dt));
      }
      // The CPU layer.
      std::mt19937_64 rng(3);
      graph::Args args{{&x}, {masked ? &mask : nullptr}};
      std::vector<const Tensor*> douts{&dy};
      for (size_t k = 0; k < n_states; ++k) {
        args.x.push_back(&s0[k]);
        args.mask.push_back(nullptr);
        douts.push_back(&ds[k]);
      }
      std::vector<Tensor> out(1 + n_states), din(args.x.size());
      graph::Saved saved;
      layer->Forward(args, &out, &saved, graph::CallContext{true, &rng});
      for (graph::Weight& wt : layer->weights()) wt.grad.Fill(0.0f);
      layer->Backward(args, out, douts, std::vector<bool>(args.x.size(), true), &din, &saved);
      // The GPU.
      const bool bias = layer->weights().size() > 2;
      std::vector<DeviceTensor> w(layer->weights().size()), g(layer->weights().size());
      for (size_t k = 0; k < w.size(); ++k) {
        ASSERT_OK(Upload(ctx_.get(), layer->weights()[k].value, DType::kF32, &w[k]));
        ASSERT_OK(g[k].Resize(ctx_.get(), layer->weights()[k].value.shape(), DType::kF32));
        Poison(&g[k]);
      }
      DeviceTensor dx_in, ddy, dmask, y, dx;
      std::vector<DeviceTensor> ds0(2), dds(2), fin(2), dinit(2);
      ASSERT_OK(Upload(ctx_.get(), x, dt, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, dt, &ddy));
      ASSERT_OK(Upload(ctx_.get(), mask, DType::kF32, &dmask));
      for (size_t k = 0; k < n_states; ++k) {
        ASSERT_OK(Upload(ctx_.get(), s0[k], dt, &ds0[k]));
        ASSERT_OK(Upload(ctx_.get(), ds[k], dt, &dds[k]));
      }
      auto state = [&](std::vector<DeviceTensor>& v, size_t k) {
        return k < n_states ? &v[k] : nullptr;
      };
      Recurrent rnn(ctx_.get(), {.cell = c.cell,
                                 .units = u,
                                 .activation = o.activation,
                                 .recurrent_activation = o.recurrent_activation,
                                 .return_sequences = c.sequences,
                                 .go_backwards = c.backwards,
                                 .reset_after = c.reset_after,
                                 .zero_output_for_mask = o.zero_output_for_mask});
      ASSERT_OK(rnn.Forward(dx_in, masked ? &dmask : nullptr, {state(ds0, 0), state(ds0, 1)},
                            w[0].as<float>(), w[1].as<float>(), bias ? w[2].as<float>() : nullptr,
                            &y));
      ASSERT_OK(rnn.FinalStates(state(fin, 0), state(fin, 1)));
      ASSERT_OK(rnn.Backward(&ddy, {state(dds, 0), state(dds, 1)}, w[0].as<float>(),
                             w[1].as<float>(), &dx, {state(dinit, 0), state(dinit, 1)},
                             g[0].as<float>(), g[1].as<float>(),
                             bias ? g[2].as<float>() : nullptr));
      const double tol = dt == DType::kF32 ? 1e-4 : Tolerance(dt);
      EXPECT_EQ(y.shape(), ys) << what;
      EXPECT_LT(DeviceError(ctx_.get(), y, out[0]), tol) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dx, din[0]), tol) << what << " dx";
      for (size_t k = 0; k < n_states; ++k) {
        EXPECT_LT(DeviceError(ctx_.get(), fin[k], out[1 + k]), tol) << what << " final state " << k;
        EXPECT_LT(DeviceError(ctx_.get(), dinit[k], din[1 + k]), tol)
            << what << " initial state " << k << "'s gradient";
      }
      for (size_t k = 0; k < g.size(); ++k) {
        EXPECT_LT(DeviceError(ctx_.get(), g[k], layer->weights()[k].grad), tol)
            << what << " " << layer->weights()[k].name;
      }
    }
  }
}

// MultiHeadAttention against the CPU layer: self-attention (the value is the key, its gradient
// summing both uses) and a separate key, causal or not, over one and two attention axes;
// output, every input gradient and every weight gradient (dropout off: the draws differ).
TEST_F(GraphCudaOpsTest, AttentionMatchesTheCpuLayer) {
  struct Case {
    Shape q, v;
    bool own_key, causal, masked;
  };
  const std::vector<Case> cases = {{{3, 5, 8}, {3, 5, 8}, false, false, false},
                                   {{2, 6, 8}, {2, 6, 5}, true, true, false},
                                   {{2, 3, 4, 6}, {2, 2, 5, 7}, true, false, false},
                                   {{3, 5, 8}, {3, 5, 8}, false, false, true},
                                   {{2, 6, 8}, {2, 4, 5}, true, true, true}};
  for (const Case& c : cases) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const std::string what = ShapeString(c.q) + " " + ShapeString(c.v) +
                               (c.own_key ? " key" : "") + (c.causal ? " causal " : " ") +
                               (c.masked ? "masked " : "") + DTypeName(dt);
      graph::MultiHeadAttentionOptions o;
      o.num_heads = 3;
      o.key_dim = 4;
      o.value_dim = 2;
      o.use_causal_mask = c.causal;
      o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
      auto layer = graph::MakeMultiHeadAttention("mha", o);
      Shape k = c.v;
      k.back() = 3;
      std::vector<Shape> in{Shape(c.q.begin() + 1, c.q.end()), Shape(c.v.begin() + 1, c.v.end())};
      if (c.own_key) in.push_back(Shape(k.begin() + 1, k.end()));
      std::mt19937_64 brng(1);
      ASSERT_TRUE(layer->Build(in, graph::BuildContext{&brng}).ok()) << what;
      const Tensor q = Rounded(ctx_.get(), Random(c.q, -1.0f, 1.0f), dt);
      const Tensor v = Rounded(ctx_.get(), Random(c.v, -1.0f, 1.0f), dt);
      const Tensor kt = Rounded(ctx_.get(), Random(k, -1.0f, 1.0f), dt);
      const Tensor dy = Rounded(ctx_.get(), Random(c.q, -1.0f, 1.0f), dt);
      // Padding masks of the query's and the value's positions (an example's first position
      // always kept, one query row wholly masked), and the key's alike.
      auto padding = [&](int64_t n, int64_t len, uint64_t seed) {
        std::mt19937_64 mrng(seed);
        Tensor m({n, len});
        for (int64_t i = 0; i < m.size(); ++i) m[i] = i % len == 0 || mrng() % 3 != 0 ? 1.0f : 0.0f;
        return m;
      };
      const int64_t tq = q.size() / (c.q[0] * c.q.back()), tv = v.size() / (c.v[0] * c.v.back());
      Tensor qm = padding(c.q[0], tq, 5), vm = padding(c.v[0], tv, 6), km = padding(c.v[0], tv, 7);
      qm[0] = 0;  // the first query attends to nothing: uniform weights, as on the CPU
      // The CPU layer.
      std::mt19937_64 rng(3);
      graph::Args args{{&q, &v}, {nullptr, nullptr}};
      if (c.masked) args.mask = {&qm, &vm};
      if (c.own_key) {
        args.x.push_back(&kt);
        args.mask.push_back(c.masked ? &km : nullptr);
      }
      std::vector<Tensor> out(1), din(args.x.size());
      graph::Saved saved;
      layer->Forward(args, &out, &saved, graph::CallContext{true, &rng});
      for (graph::Weight& w : layer->weights()) w.grad.Fill(0.0f);
      layer->Backward(args, out, {&dy}, std::vector<bool>(args.x.size(), true), &din, &saved);
      // The GPU.
      const auto& wts = layer->weights();
      std::vector<DeviceTensor> w(wts.size()), g(wts.size());
      for (size_t i = 0; i < wts.size(); ++i) {
        ASSERT_OK(Upload(ctx_.get(), wts[i].value, DType::kF32, &w[i]));
        ASSERT_OK(g[i].Resize(ctx_.get(), wts[i].value.shape(), DType::kF32));
        Poison(&g[i]);
      }
      auto f = [&](size_t i) { return w[i].as<float>(); };
      auto gf = [&](size_t i) { return g[i].as<float>(); };
      DeviceTensor dq_in, dv_in, dk_in, ddy, y, dq, dv, dk, dqm, dvm, dkm;
      ASSERT_OK(Upload(ctx_.get(), q, dt, &dq_in));
      ASSERT_OK(Upload(ctx_.get(), v, dt, &dv_in));
      ASSERT_OK(Upload(ctx_.get(), kt, dt, &dk_in));
      ASSERT_OK(Upload(ctx_.get(), dy, dt, &ddy));
      ASSERT_OK(Upload(ctx_.get(), qm, DType::kF32, &dqm));
      ASSERT_OK(Upload(ctx_.get(), vm, DType::kF32, &dvm));
      ASSERT_OK(Upload(ctx_.get(), km, DType::kF32, &dkm));
      AttentionMasks masks;
      if (c.masked) masks = {&dqm, &dvm, c.own_key ? &dkm : nullptr};
      Attention attn(ctx_.get(), {.heads = 3, .key_dim = 4, .value_dim = 2, .causal = c.causal});
      ASSERT_OK(attn.Forward(dq_in, dv_in, c.own_key ? &dk_in : nullptr, masks,
                             {f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)}, true, 1, &y));
      ASSERT_OK(attn.Backward(ddy, {f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)}, &dq, &dv,
                              c.own_key ? &dk : nullptr,
                              {gf(0), gf(1), gf(2), gf(3), gf(4), gf(5), gf(6), gf(7)}));
      const double tol = dt == DType::kF32 ? 1e-4 : Tolerance(dt);
      EXPECT_LT(DeviceError(ctx_.get(), y, out[0]), tol) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dq, din[0]), tol) << what << " dquery";
      EXPECT_LT(DeviceError(ctx_.get(), dv, din[1]), tol) << what << " dvalue";
      if (c.own_key) {
        EXPECT_LT(DeviceError(ctx_.get(), dk, din[2]), tol) << what << " dkey";
      }
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_LT(DeviceError(ctx_.get(), g[i], wts[i].grad), tol) << what << " " << wts[i].name;
      }
    }
  }
}

// Transposed convolutions through the convolution plans, against the CPU layers: Keras's
// output lengths and TensorFlow's padding (odd same padding included), 1D to 3D.
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
