#pragma once
// How many threads the CPU kernels may use: the trainer's --threads. OpenBLAS's GEMMs run on
// its own threads; oneDNN's convolutions and the optimizers' update loops on OpenMP's, whose
// count is per calling thread, so each such kernel applies it on entry (UseCpuThreads). Both
// start at one thread, not one per core, until SetCpuThreads says otherwise.
// Thread-safety: SetCpuThreads may be called from any thread; the count is process-wide.

namespace lockstep::trainer::cpu {

void SetCpuThreads(int threads);
int CpuThreads();
// Sets the calling thread's OpenMP team size to CpuThreads() when it differs.
void UseCpuThreads();

}  // namespace lockstep::trainer::cpu
