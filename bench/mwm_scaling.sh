#!/usr/bin/env bash
# Scaling of MultiWorkerMirrored on this machine: steady training samples/s of one worker
# (batch B) against two worker processes over the ring (global batch 2B, B per worker), same
# model and data, in one run. Efficiency = two-worker samples/s / (2 x one-worker samples/s).
# Usage: bench/mwm_scaling.sh [BUILD_DIR] [MODEL] [PER_WORKER_BATCH]
set -euo pipefail
build=${1:-build/release}
model=${2:-mlp}
batch=${3:-64}
trainer=$build/trainer/lockstep-trainer
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
rate() { sed -n 's/^steady training samples\/s: \([0-9.]*\).*/\1/p' "$1"; }
# One thread per process, so two workers take the cores one worker's thread and its peer's do.
common=(--model="$model" --epochs=1 --metrics-port=0 --threads=1)

"$trainer" "${common[@]}" --batch-size="$batch" >"$tmp/one" 2>&1
one=$(rate "$tmp/one")

p0=$((20000 + RANDOM % 20000)); p1=$((p0 + 1))
cluster="{\"cluster\":{\"worker\":[\"127.0.0.1:$p0\",\"127.0.0.1:$p1\"]}"
for i in 0 1; do
  TF_CONFIG="$cluster,\"task\":{\"type\":\"worker\",\"index\":$i},\"environment\":\"cloud\"}" \
    LOCKSTEP_STRATEGY=MultiWorkerMirrored LOCKSTEP_JOB_TOKEN=bench LOCKSTEP_POD_IP=127.0.0.1 \
    LOCKSTEP_TERMINATION_LOG="$tmp/term$i" \
    "$trainer" "${common[@]}" --batch-size=$((2 * batch)) >"$tmp/w$i" 2>&1 &
done
wait
two=$(rate "$tmp/w0")
echo "$model, $batch per worker: 1 worker $one samples/s; 2 workers $two samples/s;" \
  "efficiency $(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.2f", a / (2 * b) }')" \
  "(accuracy $(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$tmp/one") /" \
  "$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$tmp/w0"))"
