#!/usr/bin/env bash
# The whole test suite, from a fresh Debian bookworm machine: installs the packages, builds
# twice (optimised, and with AddressSanitizer + UndefinedBehaviorSanitizer), and runs every
# ctest test in both builds. GPU tests (label gpu) skip themselves where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

jobs=$(nproc)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

echo "== release build"
# As the image Dockerfiles build (without the debug information), with the CUDA code for one
# architecture: the suite compiles it and runs no GPU (bench/gpu.sh builds the GPU tests for
# the machine that runs them).
# Both builds are fresh on CI: unity batches (LOCKSTEP_UNITY) parse each heavy header once per
# batch rather than once per file.
LOCKSTEP_DEBUG_INFO=${LOCKSTEP_DEBUG_INFO:-0} LOCKSTEP_UNITY=${LOCKSTEP_UNITY:-ON} \
  LOCKSTEP_CUDA_ARCHITECTURES=${LOCKSTEP_CUDA_ARCHITECTURES:-90} LOCKSTEP_CHART_TESTS=ON \
  ./scripts/build.sh

# The sanitizer build is the CPU build (nvcc takes no -fsanitize): it checks the build without
# CUDA, its stubs, and every host-side piece of the GPU path (allocator, loss scaler, watchdog).
# Clang compiles it, in about half the CPU time GCC takes with the sanitizers (so the code is
# built by both compilers, warnings as errors; docs/benchmarks/test-suite.md has the figures).
# Line tables (-g1) are all its reports need; the benchmarks are not tests. It compiles while
# the release tests run (much of their time is spent waiting on processes), its output kept
# apart and shown if it fails.
echo "== sanitizer build (Clang, ASan + UBSan), beside the release tests"
# A build/asan that another compiler configured (GCC, before) starts afresh: CMake would reset
# the cache on the compiler change and drop the options given with it.
if [[ -f build/asan/CMakeCache.txt ]] &&
  ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++$' build/asan/CMakeCache.txt; then
  rm -rf build/asan
fi
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DLOCKSTEP_SANITIZE=ON -DLOCKSTEP_CUDA=OFF -DLOCKSTEP_BENCHMARKS=OFF -DLOCKSTEP_CHART_TESTS=ON \
  -DLOCKSTEP_UNITY="${LOCKSTEP_UNITY:-ON}" >/dev/null
cmake --build build/asan -j "$jobs" >build/asan-build.log 2>&1 &
asan_build=$!

echo "== release tests"
release=0
ctest --test-dir build/release --output-on-failure -j "$jobs" || release=$?

if ! wait "$asan_build"; then
  tail -100 build/asan-build.log
  echo "sanitizer build failed (build/asan-build.log)" >&2
  exit 1
fi
echo "== sanitizer tests"
# Two runs are the release build's alone, where the sanitizers' run covers the same code at a
# smaller size: the shipped MultiWorkerMirrored example's five epochs (its shorter variants
# mwm-kill, mwm-inplace and mwm-elastic run here), and the collectives' 64 Mi-element sweep
# (1 GiB of buffers; the sweep up to 1,000,003 elements, many chunks per rank, runs here).
ctest --test-dir build/asan --output-on-failure -j "$jobs" \
  -E '^(e2e_strategies_mwm|Large/CollectiveSweep\..*)$'
exit "$release"
