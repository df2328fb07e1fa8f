#!/usr/bin/env bash
# lockstep-trainer as the operator sees it: exit codes and termination messages for bad
# configuration and bad data, /progress while it trains, SIGTERM -> checkpoint -> exit 143,
# resume from that checkpoint (not from step 0), and a real Fashion-MNIST run that reaches a
# sane accuracy.
# Usage: trainer_cli.sh TRAINER_BINARY
set -euo pipefail
trainer=$1
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export LOCKSTEP_TERMINATION_LOG=$work/termination
export LOCKSTEP_POD_IP=127.0.0.1

# run WANT_CODE ARGS...: the trainer must exit with WANT_CODE.
run() {
  local want=$1; shift
  local code=0
  "$trainer" "$@" >"$work/out" 2>&1 || code=$?
  [[ $code == "$want" ]] || fail "exit $code, want $want for $*: $(tail -3 "$work/out")"
}
term_has() { grep -q -- "$1" "$work/termination" || fail "termination message lacks '$1': $(cat "$work/termination")"; }

run 2 --epochs=0
term_has '"reason":"BadConfig"'; term_has '"retryable":false'; term_has '--epochs'
TF_CONFIG='{"cluster":' run 2 --metrics-port=0
term_has 'TF_CONFIG'
run 3 --data-dir="$work/nowhere" --metrics-port=0
term_has '"reason":"BadData"'; term_has 'train-images-idx3-ubyte'
two_workers='{"cluster":{"worker":["localhost:1","localhost:2"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
LOCKSTEP_STRATEGY=Mirrored TF_CONFIG=$two_workers run 2 --metrics-port=0
term_has 'use MultiWorkerMirrored'
LOCKSTEP_STRATEGY=Bogus run 2 --metrics-port=0
term_has 'is not one of'
# A MultiWorkerMirrored worker whose coordinator never answers gives up (setup waits ten
# peer timeouts) with a retryable PeerLost, never hanging.
LOCKSTEP_STRATEGY=MultiWorkerMirrored TF_CONFIG=$two_workers LOCKSTEP_JOB_TOKEN=t \
  run 128 --metrics-port=0 --dataset=synthetic --peer-timeout=1
term_has '"reason":"PeerLost"'; term_has '"retryable":true'

# SIGTERM mid-run: a checkpoint, exit 143, a retryable termination message.
port=$((20000 + RANDOM % 20000))
"$trainer" --dataset=synthetic --synthetic-size=20000 --steps=100000 --batch-size=32 \
  --checkpoint-dir="$work/ckpt" --checkpoint-every=1000000 --metrics-port=$port \
  >"$work/long.out" 2>&1 &
pid=$!
get_progress() {
  (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /progress HTTP/1.0\r\n\r\n' >&3 &&
    cat <&3) 2>/dev/null || true
}
progress=""
for _ in $(seq 300); do
  progress=$(get_progress)
  [[ $progress =~ \"step\":([0-9]+) ]] && (( BASH_REMATCH[1] > 50 )) && break
  sleep 0.1
done
[[ $progress == *'"totalSteps":100000'* ]] || fail "no progress: $progress"
kill -TERM $pid
code=0; wait $pid || code=$?
[[ $code == 143 ]] || fail "SIGTERM: exit $code, want 143: $(tail -3 "$work/long.out")"
term_has '"reason":"Terminated"'; term_has '"retryable":true'
ls "$work/ckpt"/ckpt-*.lsc >/dev/null || fail "no checkpoint written on SIGTERM"

# Resume: the run goes on from the checkpoint's step, not from 0.
saved=$(ls "$work/ckpt" | sed 's/ckpt-0*//; s/\.lsc//' | tail -1)
run 0 --dataset=synthetic --synthetic-size=20000 --batch-size=32 --checkpoint-dir="$work/ckpt" \
  --metrics-port=0 --steps=$((saved + 20))
grep -q "resumed from step $saved " "$work/out" || fail "did not resume: $(head -3 "$work/out")"
grep -q "final test accuracy" "$work/out" || fail "no final accuracy line"

# A corrupt newest checkpoint is skipped with a warning.
newest=$(ls "$work/ckpt"/ckpt-*.lsc | tail -1)
printf 'garbage' >"$newest"
run 0 --dataset=synthetic --synthetic-size=20000 --batch-size=32 --checkpoint-dir="$work/ckpt" \
  --metrics-port=0 --steps=$((saved + 21))
grep -q " W checkpoint] skipping checkpoint" "$work/out" || fail "corrupt checkpoint not reported"

# Real data: one epoch of the mlp on Fashion-MNIST (5 epochs reach 89%; see README).
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  run 0 --model=mlp --epochs=1 --metrics-port=0
  acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out")
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.83) }' || fail "mlp after one epoch: accuracy $acc < 0.83"
  grep -q "steady training samples/s: [1-9]" "$work/out" || fail "no throughput line"
fi
echo "PASS"
