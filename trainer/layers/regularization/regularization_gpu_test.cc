// dropout's CUDA ops against the CPU layers on fresh random inputs, for each storage dtype,
// by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs are poisoned (NaN)
// before each op so an unwritten element fails. Every test skips itself where no GPU is
// visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(RegularizationCudaOps, SkippedWithoutCuda) {
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

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
