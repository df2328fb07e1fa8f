#!/usr/bin/env bash
# Recovery of a MultiWorkerMirrored job from a lost worker, on `lockstep local`: InPlace against
# RestartGroup, side by side in one run. A chief and three workers train (mlp, then cnn); worker
# 1 is killed with SIGKILL mid-epoch, several times, each kill once the group is stepping again.
# For each kill:
#   recovery  the kill -> the chief's log line "every rank is stepping again" (the first step
#             every rank completed after it: the chief steps only when all do), from the
#             timestamps of the kill and of that line, on this machine's clock;
#   lost      completed steps not kept: the chief's step just before the kill, less the step
#             training went on from (status.recoveries' resumedStep, or the checkpoint resumed);
#   caught up the kill -> the chief past the step it had reached at the kill (the lost steps
#             trained again), polled from its /progress every 20 ms.
# Usage: bench/recovery.sh [BUILD_DIR] [KILLS] [MODELS...]   (default build/release 3 mlp cnn)
#        bench/recovery.sh BUILD_DIR faults [MODEL]             (default mlp)
# `faults`: one InPlace job meets each fault a cluster causes, one after another, mid-way
# between checkpoints: worker 1's pod deleted (SIGTERM), worker 0 evicted through the Eviction
# API, worker 1 SIGKILLed, the chief's pod deleted (SIGTERM; the coordination service it hosts
# moves to worker 0), worker 0 SIGKILLed (the host now: the service moves back to the chief),
# the chief SIGKILLed (the host again). Per fault:
# seconds to training again (the fault -> the chief's "every rank is stepping again" line, its
# replacement's for the chief's faults), completed steps lost, restarts counted against
# backoffLimit by it, and the attempt after it.
set -euo pipefail
build=$(cd "${1:-build/release}" && pwd)
mode=kills
if [[ ${2:-} == faults ]]; then mode=faults; set -- "$1" 1 "${@:3}"; fi
kills=${2:-3}
shift 2 || shift $#
models=("${@:-mlp}")
[[ $# -gt 0 ]] || models=(mlp cnn)
lockstep=$build/operator/lockstep
src=$(cd "$(dirname "$0")/.." && pwd)
source "$src/e2e/lib.sh"
export PATH=$build/trainer:$PATH

# The chief's step now, from its own /progress (the operator polls it only every 10 s).
chief_step() {
  local ip
  ip=$(k get pod "$1-chief-0" -o jsonpath='{.status.podIP}' 2>/dev/null) || return 0
  [[ -n $ip ]] || return 0
  local body
  body=$(curl -sf --max-time 1 "http://$ip:9464/progress" 2>/dev/null) || return 0
  sed -n 's/.*"step":\([0-9]*\).*/\1/p' <<<"$body"
}
wait_chief_step() {  # JOB N: until the chief's step passes N (bounded)
  for _ in $(seq 2400); do
    local s
    s=$(chief_step "$1")
    [[ -n $s ]] && (( s > $2 )) && return 0
    sleep 0.05
  done
  fail "$1 never passed step $2"
}
# Seconds since the epoch of a log line's "2026-11-25T06:53:44.595Z" timestamp.
log_time() { date -u -d "$(cut -c1-23 <<<"$1" | tr T ' ')" +%s.%N; }

# A chief and three workers; `recovery` as asked; checkpoints every 200 steps for the group
# restart to resume from; the model's epochs long enough for every kill.
manifest() {  # NAME MODEL RECOVERY EPOCHS
  sed -e "s/name: fmnist-mwm$/name: $1/" -e "s/fmnist-mwm-checkpoints/$1-checkpoints/" \
    -e "s/--model=mlp/--model=$2/" -e "s/--epochs=5/--epochs=$4/" \
    -e 's/--checkpoint-every=500/--checkpoint-every=200/' \
    -e "s/recovery: InPlace/recovery: $3/" -e 's/replicas: 2$/replicas: 3/' \
    -e 's/backoffLimit: 3/backoffLimit: 10/' \
    "$src/examples/multi-worker-mirrored.yaml"
}

run_case() {  # MODEL RECOVERY: one job, `kills` kills; prints one line per kill
  local model=$1 recovery=$2 name
  name=$(tr '[:upper:]' '[:lower:]' <<<"$model-$recovery")
  local epochs=$(( kills / 3 + 2 ))  # 625 steps an epoch; kills at steps 300, 500, 700...
  manifest "$name" "$model" "$recovery" "$epochs" >"$work/$name.yaml"
  "$lockstep" run "$work/$name.yaml" --timeout 1800 >"$work/$name.out" 2>&1 &
  local run_pid=$!
  for kill_no in $(seq "$kills"); do
    # Mid-way between checkpoints (every 200 steps), at the same steps for both recoveries.
    wait_chief_step "$name" $(( 200 * kill_no + 100 ))
    local victim before t0
    victim=$(pid_of "$name" worker 1) || fail "no process for $name-worker-1"
    before=$(chief_step "$name")
    t0=$(date +%s.%N)
    kill -KILL "$victim"
    # The chief's line for this recovery: its first "stepping again" after the kill (a group
    # restart's new chief logs its own).
    local line=""
    for _ in $(seq 2400); do
      line=$(k logs "$name-chief-0" 2>/dev/null | grep "every rank is stepping again" | tail -1 || true)
      if [[ -n $line ]]; then
        local t
        t=$(log_time "$line")
        awk -v a="$t" -v b="$t0" 'BEGIN { exit !(a > b) }' && break
      fi
      sleep 0.1
    done
    local t1 resumed ip t2
    t1=$(log_time "$line")
    ip=$(k get pod "$name-chief-0" -o jsonpath='{.status.podIP}')
    for _ in $(seq 3000); do
      local body s
      body=$(curl -sf --max-time 1 "http://$ip:9464/progress" 2>/dev/null) || body=""
      s=$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' <<<"$body")
      [[ -n $s ]] && (( s > before )) && break
      sleep 0.02
    done
    t2=$(date +%s.%N)
    if [[ $recovery == InPlace ]]; then
      resumed=$(sed -n 's/.*stepping again at step \([0-9]*\).*/\1/p' <<<"$line")
      resumed=$((resumed - 1))  # the line names the first step completed again
    else
      resumed=$(sed -n 's/.*resumed from the checkpoint of step \([0-9]*\).*/\1/p' <<<"$line")
    fi
    printf '%-4s %-12s kill %d at step %5d: training again after %6.2f s, %4d completed steps lost, caught up after %6.2f s\n' \
      "$model" "$recovery" "$kill_no" "$before" "$(awk -v a="$t1" -v b="$t0" 'BEGIN { print a - b }')" \
      "$(( before > resumed ? before - resumed : 0 ))" "$(awk -v a="$t2" -v b="$t0" 'BEGIN { print a - b }')"
  done
  wait "$run_pid" || fail "$name: $(tail -5 "$work/$name.out")"
  if [[ -n ${RECOVERY_BENCH_LOGS:-} ]]; then k logs "$name-chief-0" | grep -E "recovery|checkpoint\]" >&2; fi
  echo "$model $recovery: $(k get tj "$name" -o jsonpath='{.status.state}, attempt {.status.attempt}, restartCount {.status.restartCount}'); $(k logs "$name-chief-0" | grep -o 'final test accuracy: [0-9.]*')"
  k delete tj "$name" >/dev/null
}

# The chief's line for the recovery from a fault at time T0: its (or its replacement's) first
# "every rank is stepping again" after T0.
stepping_line() {  # JOB T0
  for _ in $(seq 2400); do
    local line t
    line=$(k logs "$1-chief-0" 2>/dev/null | grep "every rank is stepping again" | tail -1 || true)
    if [[ -n $line ]]; then
      t=$(log_time "$line")
      awk -v a="$t" -v b="$2" 'BEGIN { exit !(a > b) }' && { echo "$line"; return 0; }
    fi
    sleep 0.1
  done
  fail "$1: no rank stepped again after the fault"
}

fault_case() {  # MODEL: one InPlace job, each fault in turn; prints one line per fault
  local model=$1 name
  name=$(tr '[:upper:]' '[:lower:]' <<<"$model-faults")
  manifest "$name" "$model" InPlace 4 >"$work/$name.yaml"
  "$lockstep" run "$work/$name.yaml" --timeout 1800 >"$work/$name.out" 2>&1 &
  local run_pid=$! n=0
  printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s-worker-0"}}' "$name" \
    >"$work/eviction.json"
  for fault in sigterm-worker evict-worker sigkill-worker sigterm-chief sigkill-host-worker \
    sigkill-chief; do
    n=$((n + 1))
    wait_chief_step "$name" $(( 200 * n + 100 ))
    local before restarts0 t0 line resumed
    before=$(chief_step "$name")
    restarts0=$(k get tj "$name" -o jsonpath='{.status.restartCount}')
    t0=$(date +%s.%N)
    case $fault in
      sigterm-worker) k delete pod "$name-worker-1" --wait=false >/dev/null ;;
      evict-worker) k create --raw "/api/v1/namespaces/default/pods/$name-worker-0/eviction" \
                      -f "$work/eviction.json" >/dev/null ;;
      sigkill-worker) kill -KILL "$(pid_of "$name" worker 1)" ;;
      sigterm-chief) k delete pod "$name-chief-0" --wait=false >/dev/null ;;
      sigkill-host-worker) kill -KILL "$(pid_of "$name" worker 0)" ;;
      sigkill-chief) kill -KILL "$(pid_of "$name" chief 0)" ;;
    esac
    line=$(stepping_line "$name" "$t0")
    # The chief stopped alone trains on for its leave window (the whole job's stop would reach
    # the others in it) before it leaves: when it left, from worker 1's log.
    local note=""
    if [[ $fault == sigterm-chief ]]; then
      local left
      left=$(k logs "$name-worker-1" | grep "membership changes at step" | while read -r l; do
               awk -v a="$(log_time "$l")" -v b="$t0" 'BEGIN { exit !(a > b) }' && { echo "$l"; break; }
             done || true)
      [[ -n $left ]] && note=$(awk -v a="$(log_time "$left")" -v b="$t0" -v c="$(log_time "$line")" \
        'BEGIN { printf " (trained on %.2f s, then stalled %.2f s)", a - b, c - a }')
    fi
    if [[ $line == *"resumed from the checkpoint of step"* ]]; then
      resumed=$(sed -n 's/.*resumed from the checkpoint of step \([0-9]*\).*/\1/p' <<<"$line")
    else
      resumed=$(sed -n 's/.*stepping again at step \([0-9]*\).*/\1/p' <<<"$line")
      resumed=$((resumed - 1))  # the line names the first step completed again
    fi
    printf '%-4s %-19s at step %5d: training again after %6.2f s, %4d completed steps lost, %d restart(s) counted, attempt %s%s\n' \
      "$model" "$fault" "$before" "$(awk -v a="$(log_time "$line")" -v b="$t0" 'BEGIN { print a - b }')" \
      "$(( before > resumed ? before - resumed : 0 ))" \
      "$(( $(k get tj "$name" -o jsonpath='{.status.restartCount}') - restarts0 ))" \
      "$(k get tj "$name" -o jsonpath='{.status.attempt}')" "$note"
  done
  wait "$run_pid" || fail "$name: $(tail -5 "$work/$name.out")"
  echo "$model faults: $(k get tj "$name" -o jsonpath='{.status.state}, attempt {.status.attempt}, restartCount {.status.restartCount}'); $(k logs "$name-chief-0" | grep -o 'final test accuracy: [0-9.]*')"
  k delete tj "$name" >/dev/null
}

if [[ $mode == faults ]]; then
  echo "chief + 3 workers on lockstep local, $(nproc) cores; one fault after another, InPlace"
  fault_case "${models[0]}"
  exit 0
fi
echo "chief + 3 workers on lockstep local, $(nproc) cores; worker 1 SIGKILLed $kills times per job"
for model in "${models[@]}"; do
  for recovery in InPlace RestartGroup; do run_case "$model" "$recovery"; done
done
