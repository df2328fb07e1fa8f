#!/usr/bin/env bash
# A Kubeflow TFJob applied unchanged to `lockstep local --tfjob`, driven as a TFJob user drives
# it: kubectl apply, `kubectl wait --for=condition=Succeeded tfjob/...`, `kubectl get tfjob`.
# Checks training-operator's pod names, labels (Katib's job-role) and TF_CONFIG on the real
# pods; a worker SIGKILLed mid-run restarted alone (ExitCode, exit 137 is retryable) and the job
# still Succeeded; the status in TFJob's shape; the State column through a suspension and its
# resumption; a TFJob managed by another controller (runPolicy.managedBy) left alone.
# Usage: local_tfjob.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
source "$(dirname "$0")/lib.sh"
command -v kubectl >/dev/null || { echo "SKIP: kubectl is not installed"; exit 77; }

"$lockstep" local up --tfjob >/dev/null
# First, a job another controller owns: nothing may be done to it.
k apply -f - >/dev/null <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: elsewhere}
spec:
  runPolicy: {managedBy: kueue.x-k8s.io/multikueue}
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: tensorflow, image: tensorflow/tensorflow:2.15.0}]}}
YAML
# The example, made long enough to lose a worker in the middle.
sed -e 's/"--epochs=1"/"--epochs=4"/' "$src/examples/tfjob.yaml" | k apply -f - >/dev/null
job=tfjob-mnist
step() { k get tfjob $job -o 'jsonpath={.status.progress.step}'; }
for _ in $(seq 600); do
  s=$(step); [[ -n $s && $s -gt 100 ]] && break
  sleep 0.2
done
[[ -n $(step) && $(step) -gt 100 ]] || fail "the job never trained: $(k get tfjob $job -o yaml)"
victim=$(pid_of $job worker 1) || fail "no trainer process for worker 1"
kill -9 "$victim"
k wait --for=condition=Succeeded tfjob/$job --timeout=300s >/dev/null ||
  fail "not Succeeded: $(k get tfjob $job -o yaml)"

# training-operator's names and labels.
pods=$(k get pods -l training.kubeflow.org/job-name=$job -o 'jsonpath={range .items[*]}{.metadata.name} {end}')
for p in $job-master-0 $job-worker-0 $job-worker-1; do
  [[ " $pods " == *" $p "* ]] || fail "no pod $p: $pods"
done
[[ $(k get pods -l training.kubeflow.org/job-role=master -o name) == "pod/$job-master-0" ]] ||
  fail "job-role=master is not on the master only"
expect "tfjob-controller" k get pod $job-worker-0 -o 'jsonpath={.metadata.labels.training\.kubeflow\.org/operator-name}'
want='{"cluster":{"master":["tfjob-mnist-master-0.default.svc:2222"],"worker":["tfjob-mnist-worker-0.default.svc:2222","tfjob-mnist-worker-1.default.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
got=$(k get pod $job-worker-1 -o 'jsonpath={.spec.containers[0].env[?(@.name=="TF_CONFIG")].value}')
[[ $got == "$want" ]] || fail "TF_CONFIG: $got"
expect "TFJob" k get pod $job-master-0 -o 'jsonpath={.metadata.ownerReferences[0].kind}'
# The lost worker was replaced alone: its pod is the next incarnation, the master's the first.
expect "1" k get pod $job-worker-1 -o 'jsonpath={.metadata.labels.lockstep\.io/incarnation}'
expect "0" k get pod $job-master-0 -o 'jsonpath={.metadata.labels.lockstep\.io/incarnation}'

# The status in TFJob's shape, read as Kubeflow's tools read it.
expect "Succeeded" k get tfjob $job
status=$(k get tfjob $job -o json)
/usr/bin/python3 - "$status" <<'PY' || fail "status: $status"
import json, sys
s = json.loads(sys.argv[1])["status"]
assert s["conditions"][-1]["type"] == "Succeeded", s["conditions"]
assert all("lastUpdateTime" in c for c in s["conditions"]), s["conditions"]
assert s["replicaStatuses"]["Master"]["succeeded"] == 1, s["replicaStatuses"]
assert s["replicaStatuses"]["Worker"]["succeeded"] == 2, s["replicaStatuses"]
assert "Chief" not in s["replicaStatuses"], s["replicaStatuses"]
assert s["restartCount"] == 1, s["restartCount"]
assert s["startTime"] and s["completionTime"]
PY
expect "WorkerExitedWithCode137" k get events --field-selector involvedObject.kind=TFJob,involvedObject.name=$job

# Suspended and resumed, as TFJob's State column (its last condition) shows it.
k apply -f - >/dev/null <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: sleeper}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - {name: tensorflow, image: debian:bookworm-slim, command: ["/bin/sh", "-c", "sleep 300"]}
YAML
state() { k get tfjob sleeper --no-headers -o custom-columns=S:.status.conditions[-1:].type; }
column() { k get tfjob sleeper --no-headers | awk '{print $2}'; }
for want in Running Suspended Running; do
  [[ $want == Suspended ]] && k patch tfjob sleeper --type merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
  [[ $want == Running && $(k get tfjob sleeper -o jsonpath='{.spec.runPolicy.suspend}') == true ]] &&
    k patch tfjob sleeper --type merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
  for _ in $(seq 300); do [[ $(column) == "$want" ]] && break; sleep 0.1; done
  [[ $(column) == "$want" ]] || fail "kubectl get tfjob shows $(column), want $want"
done
k delete tfjob sleeper >/dev/null

# The other controller's job: no status, no pods, after all of the above.
[[ -z $(k get tfjob elsewhere -o 'jsonpath={.status}') ]] || fail "a job managed elsewhere got a status"
[[ -z $(k get pods -l training.kubeflow.org/job-name=elsewhere -o name) ]] ||
  fail "a job managed elsewhere got pods"
echo "e2e_local_tfjob: ok"
