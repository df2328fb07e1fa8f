#!/usr/bin/env bash
# The scale benchmark's table (docs/benchmarks/scale.md): lockstep-operator with its default limits, then
# the controller inside `lockstep local`, for 100, 1,000 and 5,000 TrainingJobs of 4 replicas
# against `lockstep local --simulate-pods`; then the old default limit (20/40) at 100 jobs for
# comparison. Each run is compared with this machine's baseline in bench/results/ (arguments
# after the job counts, such as --record-baseline, are not taken: run scale_bench for that).
# Usage: bench/scale.sh [BUILD_DIR] [JOBS...]   (default build/release, 100 1000 5000)
set -uo pipefail
build=${1:-build/release}
shift || true
sizes=("${@:-100 1000 5000}")
read -r -a sizes <<<"${sizes[*]}"
bench=$build/bench/scale_bench
lockstep=$build/operator/lockstep
operator=$build/operator/lockstep-operator
status=0
for n in "${sizes[@]}"; do
  "$bench" --lockstep "$lockstep" --operator "$operator" --jobs "$n" || status=1
done
for n in "${sizes[@]}"; do
  "$bench" --lockstep "$lockstep" --in-process --jobs "$n" || status=1
done
"$bench" --lockstep "$lockstep" --operator "$operator" --jobs 100 --qps 20 --burst 40 || status=1
exit $status
