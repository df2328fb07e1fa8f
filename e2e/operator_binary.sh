#!/usr/bin/env bash
# The lockstep-operator binary against `lockstep local` started without its in-process
# controller: leader election on a Lease, /healthz, /readyz and /metrics, JSON logs, a job run
# to Succeeded, a Kubeflow TFJob run to Succeeded (--tfjob), and a graceful SIGTERM that
# releases the Lease.
# Usage: operator_binary.sh LOCKSTEP_BINARY OPERATOR_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
operator=$2
src=$3
source "$(dirname "$0")/lib.sh"

# GET PATH from the operator's endpoint with bash alone: prints the status line and the body.
get() {
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" >&3
  cat <&3
  exec 3<&-
}

"$lockstep" local up --no-controller --tfjob >/dev/null
port=$((20000 + RANDOM % 20000))
"$operator" --kubeconfig "$LOCKSTEP_HOME/kubeconfig" --leader-elect \
  --leader-election-namespace default --metrics-addr "127.0.0.1:$port" --log-format json \
  --progress-interval 0 --tfjob 2>"$work/operator.log" &
op=$!
# Readiness is 200 while standby, 503 while the new leader syncs its caches, then 200 for good:
# wait for the Lease first, then for readiness as the leader.
await_lease_holder
for _ in $(seq 1200); do
  grep -q '^lockstep_leader 1' <<<"$(get /metrics 2>/dev/null)" &&
    grep -q "200 OK" <<<"$(get /readyz 2>/dev/null)" && break
  sleep 0.1
done
grep -q "200 OK" <<<"$(get /healthz)" || fail "healthz: $(get /healthz 2>&1)"
grep -q "200 OK" <<<"$(get /readyz)" || fail "readyz never became ready: $(tail -5 "$work/operator.log")"

"$lockstep" run "$src/examples/tf-config-check.yaml" --timeout 120 >"$work/run.out" 2>&1 ||
  fail "the job did not succeed under lockstep-operator: $(cat "$work/run.out")"

# A Kubeflow TFJob, served by the same operator (--tfjob): two workers that check their
# TF_CONFIG as training-operator writes it.
k apply -f - >/dev/null <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: tf-check}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              image: debian:bookworm-slim
              command: ["/bin/sh", "-c"]
              args:
                - |
                  case "$TF_CONFIG" in
                    '{"cluster":{"worker":["tf-check-worker-0.default.svc:2222","tf-check-worker-1.default.svc:2222"]},"task":{"type":"worker","index":'*) ;;
                    *) echo "TF_CONFIG=$TF_CONFIG"; exit 2 ;;
                  esac
YAML
k wait --for=condition=Succeeded tfjob/tf-check --timeout=120s >/dev/null ||
  fail "the TFJob did not succeed under lockstep-operator --tfjob: $(k get tfjob tf-check -o yaml)"

# The jobs gauge counts the operator's cache, which hears of the Succeeded status from its
# watch a moment after `lockstep run` read it from the API: wait for it (bounded).
# (The workers: the TrainingJob's two and the TFJob's two.)
wants=('lockstep_pods_created_total{replica_type="chief"} 1'
       'lockstep_pods_created_total{replica_type="worker"} 4'
       'lockstep_leader 1' 'lockstep_trainingjobs{state="Succeeded"} 1'
       'lockstep_tfjobs{state="Succeeded"} 1'
       'lockstep_reconcile_duration_seconds_count'
       'lockstep_api_request_duration_seconds_bucket{code="201",verb="POST",le=')
for _ in $(seq 100); do
  metrics=$(get /metrics)
  [[ $metrics == *'lockstep_trainingjobs{state="Succeeded"} 1'* &&
     $metrics == *'lockstep_tfjobs{state="Succeeded"} 1'* ]] && break
  sleep 0.1
done
for want in "${wants[@]}"; do
  [[ $metrics == *"$want"* ]] || fail "/metrics lacks '$want'"
done
grep -q "404" <<<"$(get /nothing)" || fail "unknown path not 404"

# Every log line is a JSON object with the four fields.
grep -q '^{"component":"[a-z]*","level":"info","msg":".*","ts":"' <<<"$(head -1 "$work/operator.log")" ||
  fail "not a JSON log line: $(head -1 "$work/operator.log")"

kill -TERM "$op"
wait "$op" || fail "lockstep-operator exited $? on SIGTERM"
[[ -z $(k get lease lockstep-operator -n default -o jsonpath='{.spec.holderIdentity}') ]] ||
  fail "the Lease was not released on shutdown"
echo "PASS"
