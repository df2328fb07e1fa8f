#!/usr/bin/env bash
# The Helm chart, installed as a user installs it, on `lockstep local`:
#  1. rendered with default values by lockstep-chart-render (Helm's engine) and applied with
#     `kubectl apply`; the chart's Deployment becomes two lockstep-operator pods (the local
#     deployment controller), which elect a leader through the Lease and talk to the API server
#     as the chart's ServiceAccount, with the chart's RBAC enforced;
#  2. a pod without those rights is refused (RBAC is really enforced);
#  3. the install page's path (docs/tasks/install-with-helm.md): `kubectl apply` an example, `kubectl wait --for=condition=Succeeded`;
#  4. the leader's pod is deleted: the standby takes the Lease and the Deployment is whole again;
#  5. a job that restarts once, cleans its pods and expires by TTL runs under the new leader;
#  6. every API call the operators made (the audit log) is compared with the chart's RBAC:
#     each call allowed, each permission used.
# Usage: chart.sh LOCKSTEP_BINARY CHART_RENDER RBAC_COVERAGE SOURCE_DIR
set -euo pipefail
lockstep=$1
render=$2
coverage=$3
src=$4
source "$(dirname "$0")/lib.sh"
ns=lockstep-system
# wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds, polling every 0.2 s. On a
# timeout, the audit so far says which calls RBAC refused.
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      [[ -f $work/audit.log ]] && "$coverage" --manifests "$work/rendered.yaml" \
        --audit "$work/audit.log" --user system:serviceaccount:$ns:lockstep | grep FAIL
      fail "timed out after ${limit}s waiting for $what"
    fi
    sleep 0.2
  done
}
holder() { k -n $ns get lease lockstep-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
ready_replicas() { [[ $(k -n $ns get deploy lockstep -o jsonpath='{.status.readyReplicas}') == 2 ]]; }
operator_pods() { k -n $ns get pods -l app.kubernetes.io/name=lockstep -o name; }
# Conditions for wait_for (it runs them in this shell).
held_by_other_than() { local h; h=$(holder); [[ -n $h && $h != "$1" ]]; }
# The Lease names one of the operator pods that exist now; that holder is kept in
# $verified_holder (a second read could already name another).
held_by_an_operator_pod() {
  local h; h=$(holder)
  [[ -n $h ]] && grep -qx "pod/${h%_*}" <<<"$(operator_pods)" && verified_holder=$h
}
pod_phase_is() { [[ $(k get pod "$1" -o jsonpath='{.status.phase}') == "$2" ]]; }
job_gone() { ! k get tj "$1"; }
pod_gone() { ! k -n $ns get "$1"; }

# 1. Install.
"$render" --name lockstep --namespace $ns --include-crds "$src/charts/lockstep" >"$work/rendered.yaml"
"$lockstep" local up --no-controller --audit-log "$work/audit.log" >/dev/null
printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n' $ns | k apply -f - >/dev/null
# Created as Helm creates them: a client-side apply would store the TFJob CRD (576 KB) in an
# annotation over the 256 KiB limit. An existing CRD is skipped, as Helm skips it: `lockstep
# local` installs the TrainingJob CRD itself.
if ! k create -f "$work/rendered.yaml" >"$work/apply.out" 2>"$work/create.err"; then
  grep -v 'customresourcedefinitions.apiextensions.k8s.io "trainingjobs.lockstep.io" already exists' \
    "$work/create.err" >"$work/create.other" || true
  [[ ! -s $work/create.other ]] || fail "create: $(cat "$work/apply.out" "$work/create.err")"
  echo "customresourcedefinition.apiextensions.k8s.io/trainingjobs.lockstep.io exists" >>"$work/apply.out"
fi
for want in customresourcedefinition.apiextensions.k8s.io/trainingjobs.lockstep.io \
            serviceaccount/lockstep clusterrole.rbac.authorization.k8s.io/lockstep \
            clusterrolebinding.rbac.authorization.k8s.io/lockstep \
            role.rbac.authorization.k8s.io/lockstep-leader-election \
            rolebinding.rbac.authorization.k8s.io/lockstep-leader-election \
            service/lockstep-metrics deployment.apps/lockstep \
            poddisruptionbudget.policy/lockstep; do
  grep -q "^$want " "$work/apply.out" || fail "apply did not report $want: $(cat "$work/apply.out")"
done
wait_for 60 "two ready operator pods" ready_replicas
wait_for 60 "a Lease holder" held_by_other_than ""
k -n $ns wait --for=condition=Available deploy/lockstep --timeout=60s >/dev/null
[[ $(operator_pods | wc -l) == 2 ]] || fail "want 2 operator pods: $(operator_pods)"
installed_holder=$(holder)

# 2. Enforcement: a pod under the namespace's default ServiceAccount, calling the API with its
# token (kubectl sends no token over plain HTTP, so bash speaks HTTP itself), may not list
# secrets.
k apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: rbac-probe}
spec:
  restartPolicy: Never
  containers:
    - name: probe
      image: debian
      command:
        - /bin/bash
        - -c
        - |
          sa=/var/run/secrets/kubernetes.io/serviceaccount
          server=$(sed -n 's|.*server: http://||p' "$KUBECONFIG")
          exec 3<>"/dev/tcp/${server%:*}/${server#*:}"
          printf 'GET /api/v1/namespaces/default/secrets HTTP/1.0\r\nAuthorization: Bearer %s\r\n\r\n' "$(cat $sa/token)" >&3
          cat <&3
EOF
wait_for 60 "the probe pod to end" pod_phase_is rbac-probe Succeeded
expect '403 Forbidden' k logs rbac-probe
expect 'User \"system:serviceaccount:default:default\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\"' \
  k logs rbac-probe
k delete pod rbac-probe --wait=false >/dev/null

# 3. The install page's path under the chart's operator.
k apply -f "$src/examples/single-worker.yaml" >/dev/null
k wait --for=condition=Succeeded tj/fmnist-single --timeout=300s >/dev/null ||
  fail "fmnist-single did not succeed: $(k describe tj fmnist-single | tail -20)"
expect "final test accuracy" k logs fmnist-single-worker-0

# 4. Failover: the leader's pod goes; the standby leads, the Deployment replaces the pod.
# The holder's identity is "<pod name>_<random>" (the chart sets POD_NAME). It is read now,
# not at install: under load a leader may miss a renewal during step 3 and hand over, and its
# pod is then replaced, which is the same failover this step provokes. Until the standby takes
# the Lease over, it still names the replaced pod, so the holder is read once it names a pod
# that exists (a sanitizer run beside another suite caught the moment in between).
wait_for 60 "two ready operator pods" ready_replicas
wait_for 60 "the Lease held by an existing operator pod" held_by_an_operator_pod
first=$verified_holder
[[ $first == "$installed_holder" ]] ||
  echo "note: the Lease passed from $installed_holder to $first before the failover step" >&2
leader_pod=pod/${first%_*}
expect "acquired lease $ns/lockstep-operator" k -n $ns logs "$leader_pod"
k -n $ns delete "$leader_pod" >/dev/null
wait_for 60 "a new Lease holder" held_by_other_than "$first"
wait_for 60 "the Deployment to be whole again" ready_replicas
# The old pod ends gracefully (the operator releases the Lease on SIGTERM), then is gone.
wait_for 60 "the deleted pod $leader_pod to go" pod_gone "$leader_pod"

# 5. A job that restarts once (the operator deletes and recreates its pod; the template sets an
# injected variable, so the same warning repeats), then is cleaned up and deleted by its TTL.
k apply -f - >/dev/null <<'EOF'
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: restart-once}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - name: main
              image: busybox
              command: ["/bin/sh", "-c", "[ -e /state/failed ] && exit 0; touch /state/failed; exit 137"]
              env: [{name: LOCKSTEP_STRATEGY, value: OneDevice}]
              volumeMounts: [{name: state, mountPath: /state}]
          volumes: [{name: state, persistentVolumeClaim: {claimName: restart-once}}]
  runPolicy:
    backoffLimit: 3
    cleanPodPolicy: All
    ttlSecondsAfterFinished: 1
EOF
wait_for 120 "restart-once to succeed and expire" job_gone restart-once
events=$(k get events --field-selector involvedObject.name=restart-once -o json)
for reason in SuccessfulDeletePod EnvironmentKept TTLExpired; do
  [[ $events == *"\"reason\": \"$reason\""* ]] || fail "no $reason event: $events"
done
[[ $events == *'"count": 2'* ]] || fail "the repeated warning was not counted: $events"

# The operator's memory, for the chart's requests and limits.
for pid in $(pgrep -f "lockstep-operator --metrics-addr" || true); do
  echo "operator pid $pid: $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
done

# 6. RBAC against the calls. The cluster stops first, so every request is in the log.
"$lockstep" local down >/dev/null
# Listing events is for a pod stuck in ContainerCreating (its FailedMount events), where
# lockstep local's kubelet never leaves one (it reports CreateContainerConfigError instead).
"$coverage" --manifests "$work/rendered.yaml" --audit "$work/audit.log" \
  --user system:serviceaccount:$ns:lockstep --may-go-unused "list events in group core" ||
  fail "the chart's RBAC does not match the calls"
echo "ok"
