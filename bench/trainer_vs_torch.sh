#!/usr/bin/env bash
# Training throughput of lockstep-trainer against PyTorch (Debian's python3-torch) on the same
# model, batch size (64), optimizer (SGD, momentum 0.9) and thread count, run side by side: for
# each case the two alternate, three rounds, and the median of each is compared. One thread
# runs pinned to core 0; two threads on cores 0-1. Both run on the OpenMP build of OpenBLAS
# (libopenblas0-openmp): the trainer links it (trainer/CMakeLists.txt), PyTorch is given it by
# LD_LIBRARY_PATH; with the default pthreads build either side's OpenMP threads and OpenBLAS's
# fight over the cores (4x to 15x slower at two threads). The header names the CPU and each
# side's BLAS and threads.
# PyTorch trains on Fashion-MNIST loaded before the clock starts, with glibc malloc's thresholds
# fixed so its activation buffers do not page-fault every step (see torch_peer.py).
# OpenBLAS picks its kernels by CPU unless OPENBLAS_CORETYPE says otherwise; the first line
# printed names the kernels both programs get.
# Usage: bench/trainer_vs_torch.sh [TRAINER_BINARY]   (THREADS="1 2 4" overrides the counts;
#   N threads run on cores 0..N-1)
set -euo pipefail
trainer=${1:-build/release/trainer/lockstep-trainer}
here=$(cd "$(dirname "$0")" && pwd)
/usr/bin/python3 -c "import torch" 2>/dev/null || {
  echo "needs python3-torch (apt-get install python3-torch libopenblas0-openmp)" >&2; exit 77; }
median() { sort -n | sed -n 2p; }
omp=/usr/lib/x86_64-linux-gnu/openblas-openmp
"$here/blas_info.sh" "$trainer"
printf '%-5s %-7s %12s %12s %7s\n' model threads lockstep torch ratio
for model in mlp cnn; do
  steps=$([[ $model == mlp ]] && echo 3000 || echo 300)
  for threads in ${THREADS:-1 2}; do
    cpus=$([[ $threads == 1 ]] && echo 0 || echo "0-$((threads - 1))")
    ours=(); theirs=()
    for round in 1 2 3; do
      ours+=("$(taskset -c "$cpus" "$trainer" --model=$model --optimizer=sgd --learning-rate=0.01 \
        --lr-schedule=constant --batch-size=64 --steps=$steps --threads=$threads \
        --metrics-port=0 2>/dev/null | sed -n 's/^steady training samples\/s: //p')")
      theirs+=("$(LD_LIBRARY_PATH=$omp \
        taskset -c "$cpus" /usr/bin/python3 "$here/torch_reference.py" $model $threads $steps)")
    done
    a=$(printf '%s\n' "${ours[@]}" | median)
    b=$(printf '%s\n' "${theirs[@]}" | median)
    printf '%-5s %-7s %12s %12s %7.2f\n' $model $threads "$a" "$b" "$(echo "$a / $b" | bc -l)"
  done
done
