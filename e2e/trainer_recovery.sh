#!/usr/bin/env bash
# In-place recovery of a MultiWorkerMirrored group, with real processes and no operator: a
# chief and three workers train over the TCP ring (--recovery=InPlace); a worker is killed with
# SIGKILL mid-run and a new process started in its place (what the operator does), twice, the
# second time the replacement itself. Every process ends with exit 0, the chief's log shows
# each recovery with no completed step lost, and the final checkpoint is byte for byte an
# unbroken run's (the ring reduces in a fixed order; the data position goes on exactly).
# Then a worker is stopped alone with SIGTERM (a deleted or evicted pod): it leaves the group at
# a step boundary and its replacement takes its place, again ending as the unbroken run. Then
# the chief is killed: the service moves to worker 0 and the chief's replacement joins; then
# the chief is stopped alone with SIGTERM, then every task at once (a checkpoint), and without
# in-place recovery a lost chief ends the group (the workers exit retryable).
# Usage: trainer_recovery.sh TRAINER_BINARY
set -euo pipefail
trainer=$1
work=$(mktemp -d)
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export LOCKSTEP_POD_IP=127.0.0.1 LOCKSTEP_JOB_TOKEN=recovery-token LOCKSTEP_STRATEGY=MultiWorkerMirrored
# Four tasks on this machine: each gets a thread, as lockstep local's CPU share would give them.
export LOCKSTEP_CPU_LIMIT=1

# Free ports: the coordinator's (the chief's TF_CONFIG address), the workers', /progress.
read -r p0 p1 p2 p3 metrics < <(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
cluster="{\"chief\":[\"127.0.0.1:$p0\"],\"worker\":[\"127.0.0.1:$p1\",\"127.0.0.1:$p2\",\"127.0.0.1:$p3\"]}"
tf_config() { echo "{\"cluster\":$cluster,\"task\":{\"type\":\"$1\",\"index\":$2},\"environment\":\"cloud\"}"; }
args=(--dataset=synthetic --synthetic-size=4096 --model=mlp --batch-size=64 --steps=600
      --optimizer=adam --lr-schedule=constant --recovery=InPlace --peer-timeout=5
      --rejoin-timeout=60)

# start NAME TYPE INDEX DIR [ARGS...]: one task in the background; its pid in pids[NAME].
declare -A pids
start() {
  local name=$1 type=$2 index=$3 dir=$4; shift 4
  TF_CONFIG=$(tf_config "$type" "$index") LOCKSTEP_TERMINATION_LOG=$work/$name.term \
    "$trainer" "${args[@]}" --checkpoint-dir="$dir" --checkpoint-every=600 "$@" \
    >"$work/$name.log" 2>&1 &
  pids[$name]=$!
}
# finish NAME WANT: the task exits with WANT.
finish() {
  local code=0
  wait "${pids[$1]}" || code=$?
  [[ $code == "$2" ]] || fail "$1 exited $code, want $2: $(tail -5 "$work/$1.log")"
}
# step_past N: until the chief's /progress says a step past N (bounded).
step_past() {
  for _ in $(seq 600); do
    local s
    s=$(curl -sf "http://127.0.0.1:$metrics/progress" | sed -n 's/.*"step":\([0-9]*\).*/\1/p') || true
    [[ -n $s ]] && (( s > $1 )) && return 0
    sleep 0.1
  done
  fail "the chief's step never passed $1: $(tail -3 "$work/chief.log")"
}
final_checkpoint() { ls "$1" | grep -v '\.tmp' | sort | tail -1; }

# 1. Unbroken.
start chief chief 0 "$work/straight" --metrics-port=0
for i in 0 1 2; do start "w$i" worker "$i" "$work/straight" --metrics-port=0; done
for t in chief w0 w1 w2; do finish "$t" 0; done

# 2. Worker 1 killed at a step past 150 and replaced; then worker 1's replacement killed past
# step 350 and replaced again.
start chief chief 0 "$work/broken" --metrics-port="$metrics"
for i in 0 1 2; do start "w$i" worker "$i" "$work/broken" --metrics-port=0; done
step_past 150
kill -KILL "${pids[w1]}"
wait "${pids[w1]}" 2>/dev/null || true
start w1 worker 1 "$work/broken" --metrics-port=0
step_past 350
kill -KILL "${pids[w1]}"
wait "${pids[w1]}" 2>/dev/null || true
start w1 worker 1 "$work/broken" --metrics-port=0
for t in chief w0 w1 w2; do finish "$t" 0; done

recoveries=$(grep -c "every rank is stepping again" "$work/chief.log" || true)
[[ $recoveries == 2 ]] || fail "the chief saw $recoveries recoveries, want 2: $(grep recovery "$work/chief.log")"
grep -q "with a new worker 1" "$work/chief.log" || fail "no replacement named: $(grep recovery "$work/chief.log")"
if grep "completed steps lost" "$work/chief.log" | grep -vq "(0 completed steps lost)"; then
  fail "steps were lost: $(grep 'completed steps lost' "$work/chief.log")"
fi
grep -q "joined the running group" "$work/w1.log" || fail "the replacement did not join: $(head -5 "$work/w1.log")"
a=$(final_checkpoint "$work/straight") b=$(final_checkpoint "$work/broken")
[[ -n $a && $a == "$b" ]] || fail "final checkpoints differ in name: '$a' '$b'"
cmp -s "$work/straight/$a" "$work/broken/$b" ||
  fail "the recovered run's final checkpoint is not the unbroken run's"
echo "two in-place recoveries: $(grep -o 'stepping again at step [0-9]*, [0-9.]* s' "$work/chief.log" | tr '\n' ';')"

# 3. Worker 2 stopped alone with SIGTERM (its pod deleted or evicted) past step 250: it leaves
# the group at a step boundary, exiting 143; the others wait for its replacement and hand it
# their state. No step is lost: the final checkpoint is again the unbroken run's.
rm -rf "$work/left"
start chief chief 0 "$work/left" --metrics-port="$metrics"
for i in 0 1 2; do start "w$i" worker "$i" "$work/left" --metrics-port=0; done
step_past 250
kill -TERM "${pids[w2]}"
finish w2 143
grep -q "worker 2 left the group at a step boundary" "$work/w2.term" ||
  fail "worker 2 did not leave: $(cat "$work/w2.term")"
start w2 worker 2 "$work/left" --metrics-port=0
for t in chief w0 w1 w2; do finish "$t" 0; done
grep -q "worker 2 left the group (stopped by SIGTERM)" "$work/chief.log" ||
  fail "the chief did not see the leave: $(grep recovery "$work/chief.log")"
grep -q "(0 completed steps lost)" <<<"$(grep "re-formed" "$work/chief.log")" ||
  fail "steps were lost: $(grep recovery "$work/chief.log")"
c=$(final_checkpoint "$work/left")
cmp -s "$work/straight/$a" "$work/left/$c" ||
  fail "the run with a worker replaced after SIGTERM does not end as the unbroken run"
echo "worker 2 left on SIGTERM and was replaced: $(grep -o 'stepping again at step [0-9]*, [0-9.]* s' "$work/chief.log" | tr '\n' ';')"

# 4. The chief, which hosts the coordination service, killed past step 200: worker 0 (the
# lowest surviving task) takes the service over, the others follow it, and the chief's
# replacement finds it there and joins as any replacement does. No step is lost.
rm -rf "$work/chief-lost"
start chief chief 0 "$work/chief-lost" --metrics-port="$metrics"
for i in 0 1 2; do start "w$i" worker "$i" "$work/chief-lost" --metrics-port=0; done
step_past 200
kill -KILL "${pids[chief]}"
wait "${pids[chief]}" 2>/dev/null || true
start chief chief 0 "$work/chief-lost" --metrics-port="$metrics"
for t in chief w0 w1 w2; do finish "$t" 0; done
grep -q "worker 0 takes the coordination service over" "$work/w0.log" ||
  fail "worker 0 did not take the service over: $(grep collective "$work/w0.log")"
grep -q "following the coordination service to worker 0" "$work/w1.log" ||
  fail "worker 1 did not follow: $(grep collective "$work/w1.log")"
grep -q "with a new chief 0.*(0 completed steps lost)" <<<"$(grep "re-formed" "$work/w0.log")" ||
  fail "steps were lost: $(grep recovery "$work/w0.log")"
grep -q "joined the running group" "$work/chief.log" ||
  fail "the chief's replacement did not join: $(head -5 "$work/chief.log")"
c=$(final_checkpoint "$work/chief-lost")
cmp -s "$work/straight/$a" "$work/chief-lost/$c" ||
  fail "the run whose chief was replaced does not end as the unbroken run"
echo "chief lost, the service moved to worker 0: $(grep -o 'stepping again at step [0-9]*, [0-9.]* s' "$work/w0.log" | tr '\n' ';')"

# 5. The chief stopped alone with SIGTERM (its pod deleted) past step 300: it trains on for
# the window in which a whole job's stop would reach the others too (0.2 s here), then leaves at a step
# boundary; the service moves to worker 0 and the chief's replacement joins. No step is lost.
rm -rf "$work/chief-left"
start chief chief 0 "$work/chief-left" --metrics-port="$metrics" --leave-window-ms=200
for i in 0 1 2; do start "w$i" worker "$i" "$work/chief-left" --metrics-port=0; done
step_past 300
kill -TERM "${pids[chief]}"
finish chief 143
grep -q "chief 0 left the group at a step boundary" "$work/chief.term" ||
  fail "the chief did not leave: $(cat "$work/chief.term")"
start chief chief 0 "$work/chief-left" --metrics-port="$metrics"
for t in chief w0 w1 w2; do finish "$t" 0; done
grep -q "with a new chief 0.*(0 completed steps lost)" <<<"$(grep "re-formed" "$work/w0.log")" ||
  fail "steps were lost: $(grep recovery "$work/w0.log")"
c=$(final_checkpoint "$work/chief-left")
cmp -s "$work/straight/$a" "$work/chief-left/$c" ||
  fail "the run whose chief left on SIGTERM does not end as the unbroken run"
echo "chief left on SIGTERM, the service moved to worker 0: $(grep -o 'stepping again at step [0-9]*, [0-9.]* s' "$work/w0.log" | tr '\n' ';')"

# 6. Every task stopped with SIGTERM at once (the job deleted or suspended): the group
# checkpoints at a step boundary and every task exits 143.
rm -rf "$work/stopped"
start chief chief 0 "$work/stopped" --metrics-port="$metrics" --checkpoint-every=100000
for i in 0 1 2; do start "w$i" worker "$i" "$work/stopped" --metrics-port=0 --checkpoint-every=100000; done
step_past 150
kill -TERM "${pids[chief]}" "${pids[w0]}" "${pids[w1]}" "${pids[w2]}"
for t in chief w0 w1 w2; do finish "$t" 143; done
[[ -n $(final_checkpoint "$work/stopped") ]] ||
  fail "the stopped job left no checkpoint: $(tail -3 "$work/chief.log")"
echo "the whole job stopped: checkpoint $(final_checkpoint "$work/stopped")"

# 7. Without in-place recovery the chief's loss ends the group: the workers give up,
# retryable, instead of waiting forever.
rm -rf "$work/restart"
start chief chief 0 "$work/restart" --metrics-port="$metrics" --recovery=RestartGroup
for i in 0 1 2; do start "w$i" worker "$i" "$work/restart" --metrics-port=0 --recovery=RestartGroup; done
step_past 100
kill -KILL "${pids[chief]}"
wait "${pids[chief]}" 2>/dev/null || true
for i in 0 1 2; do
  finish "w$i" 128
  grep -q '"reason":"PeerLost"' "$work/w$i.term" || fail "w$i: $(cat "$work/w$i.term")"
done
echo "chief lost without in-place recovery: the workers exited with PeerLost"
