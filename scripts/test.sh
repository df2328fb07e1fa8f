#!/usr/bin/env bash
# The whole test suite, from a fresh Debian bookworm machine: installs the packages, builds
# twice (optimised, and with AddressSanitizer + UndefinedBehaviorSanitizer), and runs every
# ctest test in both builds. GPU tests (label gpu) skip themselves where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

jobs=$(nproc)
run_suite() {
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

echo "== release build and tests"
# As the image Dockerfiles build, with the CUDA code for one architecture: the suite compiles
# it and runs no GPU (bench/gpu.sh builds the GPU tests for the machine that runs them).
LOCKSTEP_CUDA_ARCHITECTURES=${LOCKSTEP_CUDA_ARCHITECTURES:-90} ./scripts/build.sh
ctest --test-dir build/release --output-on-failure -j "$jobs"

echo "== sanitizer build (ASan + UBSan) and tests"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The sanitizer build is the CPU build (nvcc takes no -fsanitize): it checks the build without
# CUDA, its stubs, and every host-side piece of the GPU path (allocator, loss scaler, watchdog).
run_suite build/asan -DCMAKE_BUILD_TYPE=Debug -DLOCKSTEP_SANITIZE=ON -DLOCKSTEP_CUDA=OFF
