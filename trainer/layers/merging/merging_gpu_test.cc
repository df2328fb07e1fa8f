// the merges and concatenation's CUDA ops against the CPU layers on fresh random inputs, for each
// storage dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs are
// poisoned (NaN) before each op so an unwritten element fails. Every test skips itself where no GPU
// is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(MergingCudaOps, SkippedWithoutCuda) {
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

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
