#!/usr/bin/env bash
# The trainer's CPU training throughput at two commits, side by side: keras_models_bench built
# from each (the same build options), one thread pinned to core 0, the two programs alternating
# per round so drift on a shared machine falls on both; prints each run, then per model the
# means (with their ranges), the change, and the per-round paired changes. What a behaviour-
# preserving change of the engine is measured with (its target: within 3%).
#
# Usage: keras_models_ab.sh BASE_BENCH CURRENT_BENCH ROUNDS MODEL.json...
#   BASE_BENCH, CURRENT_BENCH: keras_models_bench programs (build one from a worktree of the
#   base commit: cmake -DLOCKSTEP_CUDA=OFF ... && ninja bench/keras_models_bench).
#   STEPS (default 120) measured steps per run after 10 warm-up steps.
set -euo pipefail
[[ $# -ge 4 ]] || { sed -n 2,12p "$0"; exit 2; }
base=$1 cur=$2 rounds=$3
shift 3
grep -m1 'model name' /proc/cpuinfo
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for m in "$@"; do
  for r in $(seq "$rounds"); do
    for side in base cur; do
      bin=$base
      [[ $side == cur ]] && bin=$cur
      # keras_models_bench's last line: samples/s by the wall clock, then per CPU second.
      line=$(taskset -c 0 "$bin" "$m" --threads=1 --steps="${STEPS:-120}" --warmup=10 2>&1 | tail -1)
      echo "$(basename "$m" .json) $side $r $line" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    d[(p[0], p[1])].append(float(p[-1]))
for m in dict.fromkeys(k[0] for k in d):
    b, c = d[(m, "base")], d[(m, "cur")]
    paired = " ".join(f"{100 * (y / x - 1):+.1f}" for x, y in zip(b, c))
    print(f"{m:14s} base {statistics.mean(b):10.1f} ({min(b):.0f}-{max(b):.0f})  "
          f"current {statistics.mean(c):10.1f} ({min(c):.0f}-{max(c):.0f})  "
          f"{100 * (statistics.mean(c) / statistics.mean(b) - 1):+.1f}%  paired {paired}")
PY
