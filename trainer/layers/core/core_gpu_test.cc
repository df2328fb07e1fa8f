// Dense, the activations and Embedding's CUDA ops against the CPU layers on fresh random inputs,
// for each storage dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs
// are poisoned (NaN) before each op so an unwritten element fails. Every test skips itself where no
// GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(CoreCudaOps, SkippedWithoutCuda) {
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

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
