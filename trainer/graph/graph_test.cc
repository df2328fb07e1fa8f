// The graph: shared layers sum their gradients, fan-out sums, gradients are reported ready in
// reverse order, regularizers add their penalty.
#include "trainer/graph/graph.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainer/graph/memory.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer::graph {
namespace {

using testing::CheckGraphGradients;
using testing::RandomTensor;

DenseOptions Units(int64_t n, const char* act = "linear") {
  DenseOptions o;
  o.units = n;
  o.activation = *ParseActivation(act, false);
  return o;
}

// MemAvailable, lowered to a container's limit less what it uses besides its page cache.
TEST(AvailableMemoryTest, MemAvailableAndTheCgroupLimitWithoutItsPageCache) {
  lockstep::trainer::testing::TempDir root("available_memory");
  namespace fs = std::filesystem;
  fs::create_directories(root.path() / "proc");
  fs::create_directories(root.path() / "sys/fs/cgroup");
  auto put = [&](const std::string& file, const std::string& text) {
    std::ofstream(root.path() / file) << text;
  };
  EXPECT_EQ(AvailableMemoryBytes(root.path().string()), -1);  // nothing to read
  put("proc/meminfo", "MemTotal:  16000000 kB\nMemFree:  1000 kB\nMemAvailable:  8000000 kB\n");
  EXPECT_EQ(AvailableMemoryBytes(root.path().string()), int64_t{8000000} * 1024);
  put("sys/fs/cgroup/memory.max", "max\n");  // no limit
  put("sys/fs/cgroup/memory.current", "5000000000\n");
  EXPECT_EQ(AvailableMemoryBytes(root.path().string()), int64_t{8000000} * 1024);
  // A 4 GB limit with 3.5 GB charged, 3 GB of it page cache: 3.5 GB left, below MemAvailable.
  put("sys/fs/cgroup/memory.max", "4000000000\n");
  put("sys/fs/cgroup/memory.current", "3500000000\n");
  put("sys/fs/cgroup/memory.stat", "anon 500000000\nfile 3000000000\nkernel 1000\n");
  EXPECT_EQ(AvailableMemoryBytes(root.path().string()), int64_t{3500000000});
  EXPECT_EQ(Bytes(3500000000.0), "3.5 GB");
  EXPECT_EQ(Bytes(512), "512 B");
}

TEST(GraphTest, SharedLayerHasOneWeightSetAndSummedGradients) {
  Graph g;
  std::mt19937_64 rng(3);
  BuildContext ctx{&rng};
  const int a = g.AddInput("a", {4});
  const int b = g.AddInput("b", {4});
  Layer* shared = g.AddLayer(MakeDense("shared", Units(3, "tanh")));
  Layer* add = g.AddLayer(MakeMerge("add", "Add", MergeOp::kAdd));
  Layer* head = g.AddLayer(MakeDense("head", Units(2)));
  const int ya = (*g.Call(shared, {a}, ctx))[0];
  const int yb = (*g.Call(shared, {b}, ctx))[0];
  const int s = (*g.Call(add, {ya, yb}, ctx))[0];
  g.SetOutputs({(*g.Call(head, {s}, ctx))[0]});
  EXPECT_EQ(g.Params().size(), 4u);  // shared kernel, bias; head kernel, bias
  EXPECT_EQ(g.NumParams(), 4 * 3 + 3 + 3 * 2 + 2);
  EXPECT_EQ(CheckGraphGradients(g, {RandomTensor({3, 4}, 1), RandomTensor({3, 4}, 2)}), "");
}

TEST(GraphTest, FanOutSumsGradientsAndOutputsMayBeSeveral) {
  Graph g;
  std::mt19937_64 rng(3);
  BuildContext ctx{&rng};
  const int x = g.AddInput("x", {5});
  const int h = (*g.Call(g.AddLayer(MakeDense("h", Units(4, "relu"))), {x}, ctx))[0];
  const int o1 = (*g.Call(g.AddLayer(MakeDense("o1", Units(2))), {h}, ctx))[0];
  const int o2 = (*g.Call(g.AddLayer(MakeDense("o2", Units(3, "sigmoid"))), {h}, ctx))[0];
  g.SetOutputs({o1, o2});
  EXPECT_EQ(CheckGraphGradients(g, {RandomTensor({4, 5}, 1)}), "");
}

TEST(GraphTest, GradientsAreReadyLastLayerFirst) {
  Graph g;
  std::mt19937_64 rng(3);
  BuildContext ctx{&rng};
  int t = g.AddInput("x", {3});
  for (int i = 0; i < 3; ++i) t = (*g.Call(g.AddLayer(MakeDense("d", Units(3))), {t}, ctx))[0];
  g.SetOutputs({t});
  Tensor x = RandomTensor({2, 3}, 1), dy = RandomTensor({2, 3}, 2);
  g.Forward({&x}, CallContext{});
  std::vector<std::pair<size_t, size_t>> ready;
  g.Backward({&dy}, [&](size_t first, size_t count) { ready.emplace_back(first, count); });
  EXPECT_EQ(ready, (std::vector<std::pair<size_t, size_t>>{{4, 2}, {2, 2}, {0, 2}}));
}

TEST(GraphTest, RegularizersAddTheirPenaltyAndGradient) {
  Graph g;
  std::mt19937_64 rng(3);
  BuildContext ctx{&rng};
  DenseOptions o = Units(3);
  o.kernel_l1 = 0.01f;
  o.kernel_l2 = 0.05f;
  const int x = g.AddInput("x", {4});
  g.SetOutputs({(*g.Call(g.AddLayer(MakeDense("d", o)), {x}, ctx))[0]});
  double expected = 0;
  for (float v : g.Params()[0]->values()) expected += 0.01 * std::abs(v) + 0.05 * v * v;
  EXPECT_NEAR(g.RegularizationLoss(), expected, 1e-6);
  EXPECT_EQ(CheckGraphGradients(g, {RandomTensor({2, 4}, 1)}), "");
}

TEST(GraphTest, ActivityRegularizersPenaliseOutputsPerExampleAsKeras2Does) {
  Graph g;
  std::mt19937_64 rng(3);
  BuildContext ctx{&rng};
  const int x = g.AddInput("x", {4});
  Layer* d = g.AddLayer(MakeDense("d", Units(3, "tanh")));
  d->set_activity_penalty({0.01f, 0.05f, true});
  const int h = (*g.Call(d, {x}, ctx))[0];
  g.SetOutputs({(*g.Call(g.AddLayer(MakeDense("o", Units(2))), {h}, ctx))[0]});
  Tensor in = RandomTensor({2, 4}, 1);
  g.Forward({&in}, CallContext{});
  // The hidden output, recomputed: tanh(x W + b).
  double want = 0;
  const Tensor& w = d->weights()[0].value;
  const Tensor& b = d->weights()[1].value;
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 3; ++j) {
      double z = b[j];
      for (int k = 0; k < 4; ++k) z += in[r * 4 + k] * w[k * 3 + j];
      const double y = std::tanh(z);
      want += (0.01 * std::abs(y) + 0.05 * y * y) / 2;  // divided by the batch
    }
  }
  EXPECT_NEAR(g.RegularizationLoss(), want, 1e-6);
  EXPECT_EQ(CheckGraphGradients(g, {in}), "");
}

}  // namespace
}  // namespace lockstep::trainer::graph
