#!/usr/bin/env bash
# Runs a build's whole test suite RUNS times in a row while a second copy of the same suite
# runs beside it on the same machine (as CI machines and developers' laptops run two suites at
# once), and says how each run ended. Every run must pass: a test that only passes on an idle
# machine is a defect (CONTRIBUTING.md, "Tests").
# Usage: scripts/suite-under-load.sh [BUILD_DIR] [RUNS]   (default build/release, 3)
# The second copy runs from a hard-linked copy of BUILD_DIR's test definitions, so the two
# ctest processes keep separate logs; its results are printed but do not decide the exit code.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
runs=${2:-3}
[ -f "$build/CTestTestfile.cmake" ] || { echo "no test suite in $build: build it first" >&2; exit 2; }
build=$(cd "$build" && pwd)
beside=$(mktemp -d)
# The copy beside runs in its own process group, so stopping it stops its tests too.
trap 'kill -- "-${load_pid:-0}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$beside"' EXIT
cp -al "$build/." "$beside/"
rm -rf "$beside/Testing"

set -m
(
  n=0
  while true; do
    n=$((n + 1))
    if (cd "$beside" && ctest -j2 >"$beside/run.log" 2>&1); then
      echo "  (the copy beside: run $n passed)"
    else
      echo "  (the copy beside: run $n FAILED: $(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Failed)$/\1/p' \
        "$beside/run.log" | tr '\n' ' '))"
    fi
  done
) &
load_pid=$!
set +m

status=0
for i in $(seq "$runs"); do
  log=$build/Testing/suite-under-load-$i.log
  mkdir -p "$build/Testing"
  start=$(date +%s)
  if (cd "$build" && ctest -j2 --output-on-failure >"$log" 2>&1); then
    echo "run $i of $runs: $(grep -E 'tests passed' "$log") in $(($(date +%s) - start)) s"
  else
    echo "run $i of $runs: FAILED in $(($(date +%s) - start)) s (log: $log)"
    sed -n '/The following tests FAILED/,$p' "$log"
    status=1
  fi
done
exit $status
