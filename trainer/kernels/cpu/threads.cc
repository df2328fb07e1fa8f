#include "trainer/kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>

namespace lockstep::trainer::cpu {
namespace {
std::atomic<int> cpu_threads{1};

// OpenBLAS and OpenMP start at this process's default (one thread) rather than their own (one
// per core): a second GEMM thread nobody asked for only spins beside another busy process (a
// recurrent test model spent half its time in sched_yield on two cores).
[[maybe_unused]] const bool kDefaultsApplied = [] {
  openblas_set_num_threads(1);
  omp_set_num_threads(1);
  return true;
}();
}  // namespace

void SetCpuThreads(int threads) {
  cpu_threads.store(threads > 0 ? threads : 1);
  openblas_set_num_threads(CpuThreads());
}

int CpuThreads() { return cpu_threads.load(std::memory_order_relaxed); }

void UseCpuThreads() {
  const int want = CpuThreads();
  if (omp_get_max_threads() != want) omp_set_num_threads(want);
}

}  // namespace lockstep::trainer::cpu
