#!/usr/bin/env bash
# `lockstep local` driven by kubectl: apply, get, explain, scale, patch, strict validation, cascade
# deletion, state kept across down/up, and no server process left after `down`. The API
# server is the subject here, so the TrainingJob controller is left out (--no-controller):
# the test creates pods itself under the names the controller would use.
# Usage: local_kubectl.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
source "$(dirname "$0")/lib.sh"
export KUBECONFIG=$LOCKSTEP_HOME/kubeconfig

"$lockstep" local up --no-controller
expect "is running" "$lockstep" local status
pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$LOCKSTEP_HOME/server.json")

expect "created" kubectl apply -f "$src/crds/lockstep.io_trainingjobs.yaml"
expect "fmnist-mwm created" kubectl apply -f "$src/examples/multi-worker-mirrored.yaml"
expect "unchanged" kubectl apply -f "$src/examples/multi-worker-mirrored.yaml"
expect "fmnist-mwm" kubectl get trainingjobs
expect "fmnist-mwm" kubectl get tj -o name
# kubectl explain reads the CRD's schema from the served OpenAPI v3 documents.
expect "Job-wide restart budget, honoured for every restartPolicy" \
  kubectl explain trainingjob.spec.runPolicy.backoffLimit
expect "KIND:       TrainingJob" kubectl explain tj
# Defaults from the CRD schema are applied by the server.
expect "Running" kubectl get tj fmnist-mwm -o 'jsonpath={.spec.runPolicy.cleanPodPolicy}'
# kubectl apply lets the server validate fields; unknown ones are refused.
expect 'unknown field "spec.bogus"' kubectl apply -f - <<'YAML'
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: bad}
spec:
  bogus: 1
  replicaSpecs:
    Worker: {replicas: 1, template: {spec: {containers: [{name: lockstep, image: x}]}}}
YAML
# Schema validation answers 422 with the field named.
expect "spec.replicaSpecs.Worker.replicas" kubectl apply -f - <<'YAML'
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: negative}
spec:
  replicaSpecs:
    Worker: {replicas: -1, template: {spec: {containers: [{name: lockstep, image: x}]}}}
YAML
# A job that is not elastic keeps its replica counts while it runs; suspended, it may be resized.
expect "replica counts are fixed while the job runs" kubectl scale tj fmnist-mwm --replicas=4
expect "2" kubectl get tj fmnist-mwm -o 'jsonpath={.spec.replicaSpecs.Worker.replicas}'
expect "patched" kubectl patch tj fmnist-mwm --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}'
expect "scaled" kubectl scale tj fmnist-mwm --replicas=4
expect "4" kubectl get tj fmnist-mwm -o 'jsonpath={.spec.replicaSpecs.Worker.replicas}'
expect "3" kubectl get tj fmnist-mwm -o 'jsonpath={.metadata.generation}'
expect "Replica Specs" kubectl describe tj fmnist-mwm
expect "patched" kubectl patch tj fmnist-mwm --type=merge -p '{"metadata":{"labels":{"team":"ml"}}}'
expect "fmnist-mwm" kubectl get tj -l team=ml -o name

# A pod owned by the job goes when the job goes.
uid=$(kubectl get tj fmnist-mwm -o 'jsonpath={.metadata.uid}')
kubectl apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: fmnist-mwm-worker-0
  ownerReferences: [{apiVersion: lockstep.io/v1alpha1, kind: TrainingJob, name: fmnist-mwm, uid: "$uid", controller: true}]
spec: {containers: [{name: lockstep, image: lockstep/trainer:0.1.0}]}
YAML
expect "fmnist-mwm-worker-0" kubectl get pods  # listed (the runner may have started it)
expect "deleted" kubectl delete tj fmnist-mwm
# The runner stops the pod's process, then the pod is gone.
kubectl wait --for=delete pod/fmnist-mwm-worker-0 --timeout=60s >/dev/null 2>&1 || true
expect "No resources found" kubectl get pods

# The runner runs a pod whose program exists here; kubectl logs shows what it printed.
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: hello}
spec:
  restartPolicy: Never
  containers: [{name: main, image: debian, command: [sh, -c, 'echo hello from $HOSTNAME']}]
YAML
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod/hello --timeout=60s >/dev/null
expect "hello from hello" kubectl logs hello
expect "Completed" kubectl get pod hello
expect "hello" kubectl describe pod hello

# State survives down and up.
# Imperative create commands send protobuf, which this server refuses with a clear answer.
expect "use \`kubectl apply -f\` instead" kubectl create configmap nope --from-literal=a=b
expect "created" kubectl apply -f - <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: keep}
data: {a: b}
YAML
"$lockstep" local down
# Ended: gone, or a zombie until init reaps it (down returns when the server has exited; it
# cannot reap a process it did not start, and kill -0 still finds a zombie).
state=$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$pid/stat" 2>/dev/null || true)
[[ -z $state || $state == [ZX] ]] || fail "server process $pid still running (state $state) after down"
expect "not running" "$lockstep" local status
"$lockstep" local up --no-controller
expect "keep" kubectl get configmaps
expect "b" kubectl get configmap keep -o 'jsonpath={.data.a}'
echo "PASS"
