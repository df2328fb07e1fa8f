#!/usr/bin/env bash
# SIGTERM to lockstep-operator with a backlog: 400 TrainingJobs queued behind a client-side
# limit of 5 requests/s (hours of work). The operator must stop taking keys, finish only the
# reconciles in flight, release its Lease and exit 0 within Kubernetes' default grace period
# of 30 s. Pods are simulated (`lockstep local --simulate-pods`): no process is started.
# Usage: operator_shutdown.sh LOCKSTEP_BINARY OPERATOR_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
operator=$2
src=$3
source "$(dirname "$0")/lib.sh"

metric() {  # metric NAME: its value on the operator's /metrics, 0 when absent
  exec 3<>"/dev/tcp/127.0.0.1/$port" || { echo 0; return; }
  printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  awk -v m="$1" '$1 == m {print $2; found=1} END {if (!found) print 0}' <&3
  exec 3<&-
}

"$lockstep" local up --no-controller --simulate-pods >/dev/null
port=$((20000 + RANDOM % 20000))
"$operator" --kubeconfig "$LOCKSTEP_HOME/kubeconfig" --leader-elect \
  --leader-election-namespace default --metrics-addr "127.0.0.1:$port" --qps 5 --burst 5 \
  --progress-interval 0 2>"$work/operator.log" &
op=$!
await_lease_holder

for i in $(seq 400); do
  cat <<JOB
---
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: backlog-$i}
spec:
  strategy: MultiWorkerMirrored
  replicaSpecs:
    Chief: {replicas: 1, template: {spec: {containers: [{name: lockstep, image: lockstep/trainer:0.1.0}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: lockstep, image: lockstep/trainer:0.1.0}]}}}
JOB
done >"$work/jobs.yaml"
k apply -f "$work/jobs.yaml" >/dev/null
# The backlog: at least 100 keys waiting (the queue's depth as the operator reports it).
for _ in $(seq 600); do
  depth=$(metric lockstep_workqueue_depth)
  (( ${depth%.*} >= 100 )) && break
  sleep 0.1
done
(( ${depth%.*} >= 100 )) || fail "no backlog formed (queue depth $depth)"

start=$(date +%s%N)
kill -TERM "$op"
wait "$op" || fail "lockstep-operator exited $? on SIGTERM"
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "SIGTERM with $depth keys queued: exited in $took_ms ms"
(( took_ms < 30000 )) || fail "it took $took_ms ms to stop, past the 30 s grace period"
[[ -z $(k get lease lockstep-operator -n default -o jsonpath='{.spec.holderIdentity}') ]] ||
  fail "the Lease was not released on shutdown"
echo "PASS"
