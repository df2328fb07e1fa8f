// The losses' CUDA kernels against the CPU losses (trainer/graph/loss.h) on fresh random inputs,
// for each storage dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs
// are poisoned (NaN) before each op so an unwritten element fails. Every test skips itself where no
// GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(LossCudaOps, SkippedWithoutCuda) {
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
#include "trainer/kernels/cuda/device.h"
#include "trainer/kernels/cuda/loss.h"
#include "trainer/kernels/cuda/op_test_util.h"
#include "trainer/layers/gpu_op_testing.h"

namespace lockstep::trainer::cuda {
namespace {

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

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
