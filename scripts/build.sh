#!/usr/bin/env bash
# Configures and builds the optimised tree, build/release (RelWithDebInfo): everything, or only
# the targets named. The README commands, .ci/run (through test.sh) and the image Dockerfiles
# all build with it. LOCKSTEP_CUDA_ARCHITECTURES, when set, narrows the GPU code to those
# architectures (the test suite compiles one: no GPU runs it there); LOCKSTEP_DEBUG_INFO=0
# leaves out the debug information (the test suite's build: the same optimised code, a third
# less compile time).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=()
[ -n "${LOCKSTEP_CUDA_ARCHITECTURES:-}" ] &&
  arch=(-DLOCKSTEP_CUDA_ARCHITECTURES="$LOCKSTEP_CUDA_ARCHITECTURES")
flags=()
# LOCKSTEP_CUDA=AUTO|ON|OFF, LOCKSTEP_UNITY=ON|OFF, LOCKSTEP_BENCHMARKS=ON|OFF and
# LOCKSTEP_CHART_TESTS=AUTO|ON|OFF, when set, are passed on as the CMake options of those names.
for option in LOCKSTEP_CUDA LOCKSTEP_UNITY LOCKSTEP_BENCHMARKS LOCKSTEP_CHART_TESTS; do
  [ -n "${!option:-}" ] && flags+=("-D$option=${!option}")
done
if [ "${LOCKSTEP_DEBUG_INFO:-1}" = 0 ]; then
  flags+=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG")
  if [ "${LOCKSTEP_CUDA:-AUTO}" != OFF ]; then
    flags+=(-DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG")
  fi
fi
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${arch[@]}" "${flags[@]}" \
  >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build/release -j "$(nproc)" --target "$@"
else
  cmake --build build/release -j "$(nproc)"
fi
