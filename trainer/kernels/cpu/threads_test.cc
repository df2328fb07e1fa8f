// One thread pool for every CPU kernel: at --threads=N the GEMMs and the update loops run on
// OpenMP's N (the calling thread and N-1 workers, all used), and nothing else the kernels load
// starts threads of its own (the pthreads build of OpenBLAS would add N-1 more,
// spinning beside OpenMP's). Counted, not timed: the process's threads in /proc/self/task.
#include "trainer/kernels/cpu/threads.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "trainer/kernels/cpu/gemm.h"
#include "trainer/kernels/cpu/update.h"

namespace lockstep::trainer::cpu {
namespace {

size_t Threads() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(CpuThreadsTest, GemmsAndUpdateLoopsShareOnePoolOfTheGivenSize) {
  ASSERT_EQ(Threads(), 1u) << "the test process starts with one thread";
  constexpr int kThreads = 3;
  SetCpuThreads(kThreads);
  EXPECT_NE(CpuThreading().find("(OpenMP build"), std::string::npos) << CpuThreading();
  EXPECT_NE(CpuThreading().find("in one OpenMP pool of 3 threads"), std::string::npos)
      << CpuThreading();

  // Large enough that OpenBLAS splits the GEMM and the update loop splits the tensor.
  const int64_t n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::vector<float> p(1 << 20, 1.0f), g(p.size(), 0.1f), s0(p.size());
  UpdateParams u;
  u.rule = UpdateRule::kTorchSgd;
  u.lr = 0.01f;
  u.momentum = 0.9f;
  for (int i = 0; i < 3; ++i) {
    UseCpuThreads();
    Gemm(false, false, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data());
    ApplyUpdate(u, p.data(), g.data(), s0.data(), nullptr, nullptr, static_cast<int64_t>(p.size()));
  }
  EXPECT_FLOAT_EQ(c[0], 0.5f * 0.25f * n);
  EXPECT_EQ(Threads(), static_cast<size_t>(kThreads))
      << "threads beyond the one pool of " << kThreads << ": " << CpuThreading();
  SetCpuThreads(1);
}

}  // namespace
}  // namespace lockstep::trainer::cpu
