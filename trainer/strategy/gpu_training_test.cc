// Training on GPUs against the CPU (ctest label gpu; every test skips itself where no GPU is
// visible or the build has no CUDA).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(GpuTrainingTest, SkippedWithoutCuda) {
  GTEST_SKIP() << lockstep::trainer::cuda::GpuCount().why_none;
}

#else

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "trainer/comm/nccl.h"
#include "trainer/data/batcher.h"
#include "trainer/data/dataset.h"
#include "trainer/kernels/cuda/gpu_available.h"
#include "trainer/strategy/data_parallel.h"
#include "trainer/strategy/engine.h"
#include "trainer/testing/source_dir.h"

namespace lockstep::trainer {
namespace {

class GpuTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda::GpuCountResult n = cuda::GpuCount();
    if (n.count == 0) GTEST_SKIP() << n.why_none;
    gpus_ = n.count;
  }
  static TrainerConfig Config(const std::string& model, const std::string& precision) {
    TrainerConfig c;
    c.device = Device::kGpu;
    c.model = model;
    c.precision = *ParsePrecision(precision);
    c.dataset = "synthetic";
    c.synthetic_size = 4096;
    c.batch_size = 64;
    c.steps = 150;
    c.optimizer = "adam";
    c.metrics_port = 0;
    return c;
  }
  int gpus_ = 0;
};

// The relative difference of the updates (after - before) two engines made.
double UpdateError(const std::vector<Tensor>& before, Model& a, Model& b) {
  double diff = 0, norm = 0;
  std::vector<Tensor*> pa = a.Params(), pb = b.Params();
  for (size_t i = 0; i < pa.size(); ++i) {
    for (int64_t j = 0; j < pa[i]->size(); ++j) {
      const double da = (*pa[i])[j] - before[i][j], db = (*pb[i])[j] - before[i][j];
      diff += (da - db) * (da - db);
      norm += db * db;
    }
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

TEST_F(GpuTrainingTest, OneStepMatchesTheCpuEngineInEveryPrecision) {
  for (const char* model : {"mlp", "cnn"}) {
    for (const char* precision : {"float32", "mixed_bfloat16", "mixed_float16"}) {
      TrainerConfig c = Config(model, precision);
      c.tf32 = false;
      c.optimizer = "sgd";
      c.momentum = 0.0f;
      absl::StatusOr<Datasets> data = LoadDatasets(c);
      ASSERT_TRUE(data.ok()) << data.status();
      Batcher batches(&data->train, {.global_batch = 64, .seed = 3});
      Batch b = batches.Next();
      TrainerConfig cc = c;
      cc.device = Device::kCpu;
      cc.precision = Precision::kFloat32;
      absl::StatusOr<std::unique_ptr<Engine> > cpu = MakeEngine(cc, {}, 0, nullptr);
      absl::StatusOr<std::unique_ptr<Engine> > gpu =
          MakeEngine(c, {.gpu = true, .gpus = 1}, 0, nullptr);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      std::vector<Tensor> before;
      for (Tensor* t : (*cpu)->model().Params()) before.push_back(*t);
      absl::StatusOr<StepResult> lc = (*cpu)->TrainStep(b);
      absl::StatusOr<StepResult> lg = (*gpu)->TrainStep(b);
      ASSERT_TRUE(lg.ok()) << lg.status();
      EXPECT_NEAR(lg->loss, lc->loss, 0.02 * lc->loss) << model << " " << precision;
      ASSERT_TRUE(*(*cpu)->Apply(0.01f));
      absl::StatusOr<bool> applied = (*gpu)->Apply(0.01f);
      ASSERT_TRUE(applied.ok()) << applied.status();
      ASSERT_TRUE(*applied) << "the first fp16 step overflowed at scale 2^15";
      ASSERT_TRUE((*gpu)->Store().ok());
      const double tol = std::string(precision) == "float32" ? 1e-4 : 5e-2;
      EXPECT_LT(UpdateError(before, (*gpu)->model(), (*cpu)->model()), tol)
          << model << " " << precision;
    }
  }
}

// A Keras model file with its compiled optimizer: one step of the GPU engine (DeviceGraph, the
// optimizer's rule as the fused kernel, clipping on the device) against the CPU engine.
TEST_F(GpuTrainingTest, KerasModelFilesStepAsOnTheCpu) {
  const std::string keras_adam =
      R"({"class_name": "Adam", "config": {"learning_rate": 0.01, "clipnorm": 0.5}})";
  const std::string keras_rmsprop =
      R"({"class_name": "RMSprop", "config": {"momentum": 0.5, "global_clipnorm": 1.0}})";
  for (const char* model :
       {"examples/models/cnn.json", "trainer/model/testdata/every_gpu_op.json"}) {
    for (const std::string& opt : {keras_adam, keras_rmsprop}) {
      TrainerConfig c = Config((testing::SourceDir() / model).string(), "float32");
      c.tf32 = false;
      c.keras_optimizer = opt;
      absl::StatusOr<std::unique_ptr<Engine> > gpu =
          MakeEngine(c, {.gpu = true, .gpus = 1}, 0, nullptr);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      TrainerConfig cc = c;
      cc.device = Device::kCpu;
      absl::StatusOr<std::unique_ptr<Engine> > cpu = MakeEngine(cc, {}, 0, nullptr);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      const Shape example = (*cpu)->model().example_shape();
      Dataset d =
          SyntheticDataset(64, 3, 0, example, static_cast<int32_t>((*cpu)->model().classes()));
      Batch b;
      b.inputs = d.inputs;
      b.targets = d.targets;
      std::vector<Tensor> before;
      for (Tensor* t : (*cpu)->model().Params()) before.push_back(*t);
      absl::StatusOr<StepResult> lc = (*cpu)->TrainStep(b);
      absl::StatusOr<StepResult> lg = (*gpu)->TrainStep(b);
      ASSERT_TRUE(lc.ok()) << lc.status();
      ASSERT_TRUE(lg.ok()) << lg.status();
      EXPECT_NEAR(lg->loss, lc->loss, 1e-3 * lc->loss) << model;
      ASSERT_TRUE(*(*cpu)->Apply(0.01f));
      ASSERT_TRUE(*(*gpu)->Apply(0.01f));
      ASSERT_TRUE((*gpu)->Store().ok());
      EXPECT_LT(UpdateError(before, (*gpu)->model(), (*cpu)->model()), 1e-3) << model << opt;
      // The optimizer's slots came back into the host optimizer's state.
      std::vector<Tensor*> sg = (*gpu)->optimizer().State(), sc = (*cpu)->optimizer().State();
      ASSERT_EQ(sg.size(), sc.size());
      for (size_t i = 0; i < sg.size(); ++i) {
        for (int64_t j = 0; j < sc[i]->size(); ++j) {
          ASSERT_NEAR((*sg[i])[j], (*sc[i])[j], 1e-3 * (std::abs((*sc[i])[j]) + 1e-3))
              << model << opt << " state " << i;
        }
      }
    }
  }
}

// The built-in cnn (examples/models/cnn.json) on the device graph.
TEST_F(GpuTrainingTest, CnnTrainsAsWellAsOnTheCpu) {
  for (const std::string model : {"cnn"}) {
    TrainerConfig cc = Config(model, "float32");
    cc.device = Device::kCpu;
    absl::StatusOr<Datasets> data = LoadDatasets(cc);
    ASSERT_TRUE(data.ok());
    absl::StatusOr<TrainResult> cpu_run = RunReplica(cc, *data, {});
    ASSERT_TRUE(cpu_run.ok()) << cpu_run.status();
    for (const char* precision : {"float32", "mixed_bfloat16", "mixed_float16"}) {
      TrainerConfig c = Config(model, precision);
      absl::StatusOr<TrainResult> r =
          RunReplica(c, *data, {.placement = {.gpu = true, .gpus = gpus_}});
      ASSERT_TRUE(r.ok()) << model << " " << precision << ": " << r.status();
      EXPECT_EQ(r->steps, 150);
      EXPECT_GT(r->test_accuracy, cpu_run->test_accuracy - 0.03) << model << " " << precision;
    }
  }
}

TEST_F(GpuTrainingTest, MirroredOverEveryGpuWithNccl) {
  TrainerConfig c = Config("mlp", "float32");
  c.strategy = Strategy::kMirrored;
  std::atomic<bool> stop{false};
  absl::StatusOr<TrainResult> r = RunMirrored(c, nullptr, &stop);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->test_accuracy, 0.8);
  // CentralStorage: variables on the host, compute on the GPUs.
  c.strategy = Strategy::kCentralStorage;
  c.precision = Precision::kMixedBfloat16;
  absl::StatusOr<TrainResult> central = RunMirrored(c, nullptr, &stop);
  ASSERT_TRUE(central.ok()) << central.status();
  EXPECT_GT(central->test_accuracy, 0.8);
}

TEST_F(GpuTrainingTest, NcclSingleRankCommunicatorRunsAndAborts) {
  absl::StatusOr<std::vector<std::unique_ptr<comm::Collective> > > group =
      comm::MakeLocalNcclGroup(1, absl::Seconds(30));
  ASSERT_TRUE(group.ok()) << group.status();
  comm::Collective& nccl = *(*group)[0];
  EXPECT_EQ(nccl.name(), "nccl");
  EXPECT_TRUE(nccl.device_buffers());
  // Host buffers (staged through the device).
  std::vector<float> host = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(nccl.AllReduce(host.data(), 3)->Wait(absl::Seconds(30)).ok());
  EXPECT_EQ(host, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  ASSERT_TRUE(nccl.Broadcast(host.data(), 3, 0)->Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(nccl.Barrier()->Wait(absl::Seconds(30)).ok());
  // Device buffers (asynchronous).
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 3 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), 3 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(nccl.AllReduce(dev, 3)->Wait(absl::Seconds(30)).ok());
  std::vector<float> back(3);
  ASSERT_EQ(cudaMemcpy(back.data(), dev, 3 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  // After an abort every operation fails with its status, at once.
  nccl.Abort(absl::UnavailableError("peer lost: worker 1"));
  absl::Status s = nccl.AllReduce(dev, 3)->Wait(absl::Seconds(30));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("worker 1"), std::string::npos);
  cudaFree(dev);
}

}  // namespace
}  // namespace lockstep::trainer

#endif  // LOCKSTEP_HAVE_CUDA
