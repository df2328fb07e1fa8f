// DeviceGraph against the CPU graph it mirrors (ctest label gpu; every test skips itself where
// no GPU is visible or the build has no CUDA): the same weights and batch give the same loss,
// correct count and gradients, and the kept statistics move alike; in fp32 with TF32 off to
// 1e-4, in bf16 and fp16 to the 16-bit tolerances. The models: the examples, two test models
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

double RelativeError(const std::vector<Tensor>& got, const std::vector<Tensor*>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    for (int64_t j = 0; j < want[i]->size(); ++j) {
      const double g = got[i][j], w = (*want[i])[j];
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      diff += (g - w) * (g - w);
      norm += w * w;
    }
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
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

  // A batch of the model's examples: token ids below the vocabulary, values in [-1, 1)
  // elsewhere, and labels of its classes.
  static std::pair<Tensor, std::vector<int32_t> > Batch(GraphModel& m, int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Shape s{n};
    for (int64_t d : m.example_shape()) s.push_back(d);
    Tensor x(s);
    if (m.vocabulary() > 0) {
      std::uniform_int_distribution<int64_t> d(0, m.vocabulary() - 1);
      for (float& v : x.values()) v = static_cast<float>(d(rng));
    } else {
      std::uniform_real_distribution<float> d(-1, 1);
      for (float& v : x.values()) v = d(rng);
    }
    std::uniform_int_distribution<int32_t> c(0, static_cast<int32_t>(m.classes()) - 1);
    std::vector<int32_t> y(static_cast<size_t>(n));
    for (int32_t& v : y) v = c(rng);
    return {x, y};
  }

  // The same batch as the host model takes it.
  static Dataset Host(const GraphModel& m, const Tensor& x, const std::vector<int32_t>& y) {
    Dataset d{.inputs = {x}, .targets = {Tensor()}};
    m.Targets(y, &d.targets[0]);
    return d;
  }

  std::unique_ptr<cuda::GpuContext> ctx_;
};

bool HasNoise(const graph::Graph& g) {
  for (const auto& l : g.layers()) {
    if (l->class_name() == "Dropout" || l->class_name() == "GaussianNoise") return true;
  }
  return false;
}

TEST_F(DeviceGraphTest, LossAndGradientsMatchTheCpuGraph) {
  for (const std::string& path : Models()) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(path + " " + cuda::DTypeName(t));
      auto host = GraphModel::Load(path, 7);
      ASSERT_TRUE(host.ok()) << host.status();
      GraphModel& m = **host;
      auto dev = DeviceGraph::Create(ctx_.get(), m, t, 7);
      ASSERT_TRUE(dev.ok()) << dev.status();
      auto [x, y] = Batch(m, 6, 11);
      const double tol = t == DType::kF32 ? 1e-4 : (t == DType::kF16 ? 2e-2 : 6e-2);

      // Inference: no noise, the moving statistics.
      const StepResult he = m.Evaluate(Host(m, x, y));
      absl::StatusOr<cuda::LossResult> de = (*dev)->Evaluate(x, y);
      ASSERT_TRUE(de.ok()) << de.status();
      EXPECT_NEAR(de->loss, he.loss, tol * std::max(1.0, std::abs(he.loss)));
      if (t == DType::kF32) {
        EXPECT_EQ(de->correct, he.correct);
      }
      if (HasNoise(m.graph())) {
        // Training draws differ between the devices (the distribution is the contract).
        absl::StatusOr<cuda::LossResult> dt = (*dev)->TrainStep(x, y, 1.0f);
        ASSERT_TRUE(dt.ok()) << dt.status();
        EXPECT_TRUE(std::isfinite(dt->loss));
        continue;
      }

      // Training: the loss, every gradient (times the loss scale), the moving statistics.
      const float scale = t == DType::kF16 ? 64.0f : 1.0f;
      const StepResult ht = m.TrainStep(Host(m, x, y));
      std::vector<Tensor> host_grads, host_state;
      for (Tensor* g : m.Grads()) host_grads.push_back(*g);
      for (Tensor* s : m.State()) host_state.push_back(*s);
      absl::StatusOr<cuda::LossResult> dt = (*dev)->TrainStep(x, y, scale);
      ASSERT_TRUE(dt.ok()) << dt.status();
      EXPECT_NEAR(dt->loss, ht.loss, tol * std::max(1.0, std::abs(ht.loss)));
      DeviceParams& w = (*dev)->weights();
      ASSERT_TRUE(w.StoreFlat(w.grads(), m.Grads()).ok());
      for (Tensor* g : m.Grads()) {
        for (float& v : g->values()) v /= scale;
      }
      EXPECT_LT(RelativeError(host_grads, m.Grads()), t == DType::kF32 ? 1e-3 : 0.1);
      ASSERT_TRUE(w.Store().ok());
      if (!host_state.empty()) {
        EXPECT_LT(RelativeError(host_state, m.State()), tol);
      }
    }
  }
}

TEST_F(DeviceGraphTest, TokenIdsOutsideTheTableFailTheStep) {
  auto host = GraphModel::Load(SourcePath("trainer/model/testdata/tokens.json"), 1);
  ASSERT_TRUE(host.ok());
  auto dev = DeviceGraph::Create(ctx_.get(), **host, DType::kF32, 1);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto [x, y] = Batch(**host, 4, 3);
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
