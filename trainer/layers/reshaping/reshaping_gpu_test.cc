// padding, cropping and upsampling's CUDA ops against the CPU layers on fresh random inputs, for
// each storage dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs are
// poisoned (NaN) before each op so an unwritten element fails. Every test skips itself where no GPU
// is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(ReshapingCudaOps, SkippedWithoutCuda) {
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
#include "trainer/layers/reshaping/reshaping.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/layers/rnn/rnn_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

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

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
