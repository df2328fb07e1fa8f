#!/usr/bin/env bash
# Configures and builds the optimised tree, build/release (RelWithDebInfo): everything, or only
# the targets named. The README commands, .ci/run (through test.sh) and the image Dockerfiles
# all build with it.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build/release -j "$(nproc)" --target "$@"
else
  cmake --build build/release -j "$(nproc)"
fi
