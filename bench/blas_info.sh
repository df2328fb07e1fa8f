#!/usr/bin/env bash
# The header of the benchmarks against PyTorch: the CPU, and each side's BLAS build, kernels and
# threads (the trainer's from its log; PyTorch's from the OpenBLAS the benchmarks give it, the
# OpenMP build in /usr/lib/x86_64-linux-gnu/openblas-openmp).
# Usage: blas_info.sh LOCKSTEP_TRAINER
set -uo pipefail
trainer=$1
omp=/usr/lib/x86_64-linux-gnu/openblas-openmp
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo "lockstep: $("$trainer" --model=mlp --steps=1 --threads=2 --metrics-port=0 2>&1 |
  sed -n 's/.*kernels on \(.*\)/\1/p' | head -1)"
LD_LIBRARY_PATH=$omp /usr/bin/python3 -c 'import ctypes, torch
b = ctypes.CDLL("libopenblas.so.0")
for f in ("openblas_get_config", "openblas_get_corename"): getattr(b, f).restype = ctypes.c_char_p
build = {0: "sequential", 1: "pthreads", 2: "OpenMP"}[b.openblas_get_parallel()]
print("torch %s: %s (%s build, %s kernels), torch.set_num_threads as given"
      % (torch.__version__, b.openblas_get_config().decode().split(" DYNAMIC")[0], build,
         b.openblas_get_corename().decode()))' 2>/dev/null || echo "torch: BLAS unknown"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
