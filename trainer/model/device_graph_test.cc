// DeviceGraph against the CPU graph it mirrors (ctest label gpu; every test skips itself where
// no GPU is visible or the build has no CUDA), as model/testing/device_compare.h compares
// them, in fp32, bf16 and fp16. The models: the examples, two test models
// that call every GPU op (testdata/), and every corpus model the GPU engine takes.
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(DeviceGraphTest, SkippedWithoutCuda) {
  GTEST_SKIP() << lockstep::trainer::cuda::GpuCount().why_none;
}

#else

#include <cmath>
#include <filesystem>
#include <random>

#include "trainer/model/device_graph.h"
#include "trainer/model/gpu_support.h"
#include "trainer/model/testing/device_compare.h"
#include "trainer/testing/source_dir.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;
using cuda::DType;

using ::lockstep::trainer::testing::SourcePath;

std::vector<std::string> Models() {
  std::vector<std::string> out = {SourcePath("examples/models/mlp.json"),
                                  SourcePath("examples/models/cnn.json"),
                                  SourcePath("trainer/model/testdata/every_gpu_op.json"),
                                  SourcePath("examples/models/lstm.json"),
                                  SourcePath("examples/models/attention.json"),
                                  SourcePath("trainer/model/testdata/tokens.json"),
                                  SourcePath("trainer/model/testdata/recurrent.json"),
                                  SourcePath("trainer/model/testdata/masked.json"),
                                  SourcePath("trainer/model/testdata/states.json")};
  const fs::path dir = testing::SharedDir() / "testdata" / "keras-configs";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".json") continue;
    auto m = GraphModel::Load(e.path().string(), 1);
    if (m.ok() && GpuSupported((*m)->graph()).ok()) out.push_back(e.path().string());
  }
  return out;
}

class DeviceGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda::GpuCountResult n = cuda::GpuCount();
    if (n.count == 0) GTEST_SKIP() << n.why_none;
    absl::StatusOr<std::unique_ptr<cuda::GpuContext> > c =
        cuda::GpuContext::Create(0, {.tf32 = false});
    ASSERT_TRUE(c.ok()) << c.status();
    ctx_ = std::move(*c);
  }

  std::unique_ptr<cuda::GpuContext> ctx_;
};

TEST_F(DeviceGraphTest, LossAndGradientsMatchTheCpuGraph) {
  for (const std::string& path : Models()) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(path + " " + cuda::DTypeName(t));
      auto host = GraphModel::Load(path, 7);
      ASSERT_TRUE(host.ok()) << host.status();
      auto dev = DeviceGraph::Create(ctx_.get(), **host, t, 7);
      ASSERT_TRUE(dev.ok()) << dev.status();
      testing::ExpectDeviceMatchesCpu(**host, **dev, t, 11);
    }
  }
}

TEST_F(DeviceGraphTest, TokenIdsOutsideTheTableFailTheStep) {
  auto host = GraphModel::Load(SourcePath("trainer/model/testdata/tokens.json"), 1);
  ASSERT_TRUE(host.ok());
  auto dev = DeviceGraph::Create(ctx_.get(), **host, DType::kF32, 1);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto [x, y] = testing::DeviceBatch(**host, 4, 3);
  x[5] = 50.0f;  // the table has 50 rows
  absl::StatusOr<cuda::LossResult> r = (*dev)->TrainStep(x, y, 1.0f);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("outside an Embedding's table"), std::string::npos);
  x[5] = 3.0f;
  EXPECT_TRUE((*dev)->TrainStep(x, y, 1.0f).ok());
}

}  // namespace
}  // namespace lockstep::trainer

#endif  // LOCKSTEP_HAVE_CUDA
