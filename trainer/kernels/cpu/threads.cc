#include "trainer/kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "oneapi/dnnl/dnnl.h"

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

void ParallelFor(int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& f) {
  constexpr int64_t kMinWork = 32 * 1024;
  const int threads = static_cast<int>(std::min<int64_t>(CpuThreads(), n));
  if (threads <= 1 || n * std::max<int64_t>(cost_per_item, 1) < kMinWork) {
    if (n > 0) f(0, n);
    return;
  }
  UseCpuThreads();
  const int64_t per = (n + threads - 1) / threads;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t b = std::min(n, t * per), e = std::min(n, b + per);
    if (e > b) f(b, e);
  }
}

std::string CpuThreading() {
  // openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64".
  std::string blas = openblas_get_config();
  if (const size_t space = blas.find(' ', blas.find(' ') + 1); space != std::string::npos) {
    blas.resize(space);
  }
  const int parallel = openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
  const std::string build = parallel == 2   ? "OpenMP build"
                            : parallel == 1 ? "pthreads build, its own threads"
                                            : "sequential build";
  const dnnl_version_t* v = dnnl_version();
  const int n = CpuThreads();
  return blas + " (" + build + ", " + openblas_get_corename() + " kernels) and oneDNN " +
         std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + (parallel == 1 ? " beside" : " in") + " one OpenMP pool of " +
         std::to_string(n) + (n == 1 ? " thread" : " threads");
}

}  // namespace lockstep::trainer::cpu
