#!/usr/bin/env bash
# Disruptions as a cluster causes them, on `lockstep local` with the real trainer: a
# MultiWorkerMirrored job (a chief and two workers, in-place recovery) has one worker's pod
# deleted (`kubectl delete pod`: SIGTERM) and the other evicted through the Eviction API (what
# `kubectl drain` calls). Each time the worker leaves the group at a step boundary and is
# replaced alone. Then the chief's pod is deleted: the chief, which hosts the coordination
# service, leaves as well, the service moves to worker 0 and the chief's replacement joins the
# running group. Then worker 0, the host now, is killed (SIGKILL): the service moves back to
# the chief; then the chief is killed: it moves to worker 0 again (a restart counted for each
# kill). The job ends Succeeded with restartCount 2 and attempt 0, every recovery in
# status.recoveries lost no step and names the pod and the cause, and the events name each.
# Before that, a PodDisruptionBudget the eviction would break refuses it (429), and a dry-run
# eviction leaves the pod, and a worker serves its own /progress. At the end the status holds
# the chief's final figures (progress 100%, its evaluation as the Result column) and the
# workers' pods are kept, Completed, with their logs.
# Usage: local_disruptions.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
source "$(dirname "$0")/lib.sh"

job=drained
sed -e "s/name: fmnist-mwm$/name: $job/" -e "s/fmnist-mwm-checkpoints/$job-checkpoints/" \
  -e 's/--dataset=fashion-mnist/--dataset=synthetic", "--synthetic-size=16384/' \
  -e 's/--epochs=5/--epochs=100/' "$src/examples/multi-worker-mirrored.yaml" >"$work/job.yaml"
grep -q synthetic "$work/job.yaml" || fail "the example changed: $work/job.yaml"
"$lockstep" local up >/dev/null
k apply -f "$work/job.yaml" >/dev/null

step() { k get tj "$job" -o jsonpath='{.status.progress.step}' 2>/dev/null || true; }
recoveries() { k get tj "$job" -o jsonpath='{range .status.recoveries[*]}{.replaced}{"\n"}{end}' | grep -c . || true; }
wait_for() {  # wait_for WHAT COMMAND...: until COMMAND succeeds (3 minutes at most)
  local what=$1; shift
  for _ in $(seq 1800); do "$@" && return 0; sleep 0.1; done
  fail "$what: $(k get tj "$job" -o yaml)"
}
stepping() { local s; s=$(step); [[ -n $s ]] && (( s > 300 )); }
wait_for "the job never trained" stepping
ip=$(k get pod "$job-worker-0" -o jsonpath='{.status.podIP}')
worker_step=$(curl -sf "http://$ip:9464/progress" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
[[ ${worker_step:-0} -gt 0 ]] || fail "worker 0's /progress: $(curl -s "http://$ip:9464/progress")"

evict() {  # evict POD [QUERY]: the Eviction API; prints the server's answer
  printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s"}}' "$1" >"$work/eviction.json"
  k create --raw "/api/v1/namespaces/default/pods/$1/eviction${2:-}" -f "$work/eviction.json" 2>&1 || true
}

# A budget of three available pods: evicting any would break it.
k apply -f - >/dev/null <<YAML
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: $job-budget}
spec:
  minAvailable: 3
  selector: {matchLabels: {lockstep.io/job-name: $job}}
YAML
expect "Cannot evict pod as it would violate the pod's disruption budget" evict "$job-worker-0"
k delete pdb "$job-budget" >/dev/null
uid=$(k get pod "$job-worker-0" -o jsonpath='{.metadata.uid}')
expect '"status":"Success"' evict "$job-worker-0" "?dryRun=All"
[[ $(k get pod "$job-worker-0" -o jsonpath='{.metadata.uid}{.metadata.deletionTimestamp}') == "$uid" ]] ||
  fail "a dry-run eviction touched the pod: $(k get pod "$job-worker-0" -o yaml)"

# 1. Worker 1's pod deleted.
k delete pod "$job-worker-1" --wait=false >/dev/null
one() { [[ $(recoveries) -ge 1 ]]; }
wait_for "worker 1 was not replaced in place" one
# 2. Worker 0 evicted.
expect '"status":"Success"' evict "$job-worker-0"
two() { [[ $(recoveries) -ge 2 ]]; }
wait_for "worker 0 was not replaced in place" two
# 3. The chief's pod deleted: it leaves too (after the 2 s in which a whole job's stop would
# reach the others), the coordination service moves and its replacement joins, uncounted.
k delete pod "$job-chief-0" --wait=false >/dev/null
three() { [[ $(recoveries) -ge 3 ]]; }
wait_for "the chief was not replaced in place" three
# 4. Worker 0, which hosts the service now, killed (SIGKILL): the service moves back to the
# chief, the lowest surviving replica; worker 0 is replaced in place, one restart counted.
victim=$(pid_of "$job" worker 0) || fail "no process for $job-worker-0"
kill -KILL "$victim"
four() { [[ $(recoveries) -ge 4 ]]; }
wait_for "the killed host was not replaced in place" four
# 5. The chief, the host again, killed: the service moves to worker 0 again.
victim=$(pid_of "$job" chief 0) || fail "no process for $job-chief-0"
kill -KILL "$victim"
five() { [[ $(recoveries) -ge 5 ]]; }
wait_for "the killed chief was not replaced in place" five

done_() { [[ $(k get tj "$job" -o jsonpath='{.status.state}') == Succeeded ]]; }
wait_for "the job did not succeed" done_
[[ $(k get tj "$job" -o jsonpath='{.status.restartCount}/{.status.attempt}') == 2/0 ]] ||
  fail "a disruption was counted or the group restarted: $(k get tj "$job" -o yaml)"
causes=$(k get tj "$job" -o jsonpath='{range .status.recoveries[*]}{.replaced}: {.cause} lost {.stepsLost}{"\n"}{end}')
grep -q "^worker 1: .*pod $job-worker-1 was deleted by another party" <<<"$causes" ||
  fail "the deletion is not named: $causes"
grep -q "^worker 0: .*pod $job-worker-0 was evicted through the Eviction API" <<<"$causes" ||
  fail "the eviction is not named: $causes"
host_lost="the coordination service's host, was lost"
grep -q "^chief 0: chief 0, $host_lost; worker 0 took the service over; pod $job-chief-0 was deleted by another party" <<<"$causes" ||
  fail "the chief's deletion is not named: $causes"
grep -q "^worker 0: worker 0, $host_lost; chief 0 took the service over lost 0$" <<<"$causes" ||
  fail "worker 0's loss is not named: $causes"
grep -q "^chief 0: chief 0, $host_lost; worker 0 took the service over lost 0$" <<<"$causes" ||
  fail "the chief's loss is not named: $causes"
if grep -v " lost 0$" <<<"$causes"; then fail "steps were lost: $causes"; fi
total=$(k get tj "$job" -o jsonpath='{.status.progress.totalSteps}')
[[ $(k get tj "$job" -o jsonpath='{.status.progress.summary}') == "100% ($total/$total)" ]] ||
  fail "the status does not end on the last step: $(k get tj "$job" -o jsonpath='{.status.progress}')"
result=$(k get tj "$job" -o jsonpath='{.status.evaluation.summary}')
[[ $result == "accuracy "*", loss "* ]] || fail "no final evaluation: $(k get tj "$job" -o yaml)"
grep -q "$result" <<<"$(k get tj "$job")" || fail "no Result column: $(k get tj "$job")"
for w in 0 1; do
  expect "training done after $total steps" k logs "$job-worker-$w"
done
events=$(k get events --field-selector "involvedObject.name=$job")
for reason in WorkerDeleted WorkerEvicted ChiefDeleted WorkerExitedWithCode137 ChiefExitedWithCode137 \
  RecoveredInPlace ChiefSucceeded; do
  grep -q "$reason" <<<"$events" || fail "no $reason event: $events"
done
echo "replaced in place (a deleted and an evicted worker, the deleted chief, the killed host twice): $(k get tj "$job" -o jsonpath='{range .status.recoveries[*]}{.replaced} {.recoverySeconds}s; {end}')"
