#pragma once
// How many threads the CPU kernels may use: the trainer's --threads. The GEMMs (OpenBLAS's
// OpenMP build, which the build links: trainer/CMakeLists.txt), oneDNN's convolutions and the
// optimizers' update loops all run on one pool, OpenMP's (libgomp), whose count is per calling
// thread, so each kernel applies it on entry (UseCpuThreads). It starts at one thread, not one
// per core, until SetCpuThreads says otherwise.
// Thread-safety: SetCpuThreads may be called from any thread; the count is process-wide.

#include <cstdint>
#include <functional>
#include <string>

namespace lockstep::trainer::cpu {

void SetCpuThreads(int threads);
int CpuThreads();
// Sets the calling thread's OpenMP team size to CpuThreads() when it differs.
void UseCpuThreads();
// Runs f(begin, end) over [0, n) in CpuThreads() contiguous ranges on the one pool, or once
// over all of it in the calling thread when one thread is set or the work (n times
// `cost_per_item`, in element operations) is too small to share (under 32k). f must be safe to
// run on disjoint ranges at once.
void ParallelFor(int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& f);

// What the kernels run on, for the trainer's log: "OpenBLAS 0.3.21 (OpenMP build, Haswell
// kernels) and oneDNN 2.6.3 in one OpenMP pool of 2 threads". When the loaded OpenBLAS is not
// the OpenMP build (a library path that overrides the programs' RUNPATH), it says so.
std::string CpuThreading();

}  // namespace lockstep::trainer::cpu
