// BatchNormalization and LayerNormalization's CUDA ops against the CPU layers on fresh random
// inputs, for each storage dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h).
// Outputs are poisoned (NaN) before each op so an unwritten element fails. Every test skips itself
// where no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(NormalizationCudaOps, SkippedWithoutCuda) {
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
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/layers/rnn/rnn_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

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

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
