#!/usr/bin/env bash
# `lockstep run` on `lockstep local` with the real controller and the process runner: pods are
# local processes. A job whose replicas check their TF_CONFIG succeeds; the trainer reports its
# progress into the job's status and succeeds; a worker that exits with
# a permanent code fails the job with the culprit named; a worker that exits with a retryable
# code once is restarted as a new attempt and the job then succeeds; an invalid manifest is
# refused before anything is sent.
# Usage: local_run.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
source "$(dirname "$0")/lib.sh"

# A job made of /bin/sh replicas: job NAME, then the chief's and the worker's scripts.
shell_job() {
  cat <<YAML
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  strategy: MultiWorkerMirrored
  replicaSpecs:
    Chief:
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - {name: main, image: debian:bookworm-slim, command: ["/bin/sh", "-c", "$2"]}
    Worker:
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - {name: main, image: debian:bookworm-slim, command: ["/bin/sh", "-c", "$3"]}
  runPolicy: {backoffLimit: 2}
YAML
}

# The example succeeds: every replica found its task in TF_CONFIG.
"$lockstep" run "$src/examples/tf-config-check.yaml" --timeout 120 >"$work/ok.out" 2>&1 ||
  fail "lockstep run exited $? for the example: $(cat "$work/ok.out")"
grep -q "tf-config-check succeeded" "$work/ok.out" || fail "no success line: $(cat "$work/ok.out")"
# The controller runs: nothing asks whether it does.
if grep -q "is an operator running" "$work/ok.out"; then fail "asked for a running operator: $(cat "$work/ok.out")"; fi
[[ $(k get tj tf-config-check -o jsonpath='{.status.conditions[?(@.type=="Succeeded")].reason}') == ChiefSucceeded ]] ||
  fail "wrong success reason: $(k get tj tf-config-check -o yaml)"
expect "contract checked" k logs tf-config-check-chief-0
# Events name what the controller did; sorting asks the server for whole objects in the table.
expect "ChiefSucceeded" k get events --sort-by=.lastTimestamp

# The trainer itself (the lockstep/trainer image runs the built lockstep-trainer): a short run
# succeeds; a long one reports its /progress into status.progress (`lockstep local` polls every
# 2 s) and is then deleted, which stops its process.
trainer_job() {  # trainer_job NAME STEPS
  cat <<YAML
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  strategy: OneDevice
  replicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - name: trainer
              image: lockstep/trainer:0.1.0
              args: ["--dataset=synthetic", "--synthetic-size=2000", "--batch-size=8",
                     "--steps=$2"]
YAML
}
trainer_job trainer 500 >"$work/trainer.yaml"
"$lockstep" run "$work/trainer.yaml" --timeout 300 >"$work/trainer.out" 2>&1 ||
  fail "the trainer job did not succeed: $(cat "$work/trainer.out")"
expect "final test accuracy" k logs trainer-worker-0
trainer_job long 100000000 >"$work/long.yaml"
k apply -f "$work/long.yaml" >/dev/null
step=0
for _ in $(seq 1200); do
  step=$(k get tj long -o jsonpath='{.status.progress.step}' 2>/dev/null || true)
  [[ ${step:-0} -gt 0 ]] && break
  sleep 0.1
done
[[ ${step:-0} -gt 0 ]] || fail "no training progress in the status: $(k get tj long -o yaml)"
[[ $(k get tj long -o jsonpath='{.status.progress.totalSteps}') == 100000000 ]] ||
  fail "progress without totalSteps: $(k get tj long -o jsonpath='{.status.progress}')"
k delete tj long >/dev/null

# A worker exiting 3 (permanent): the job fails and the message names the pod.
shell_job doomed "sleep 30" "exit 3" >"$work/doomed.yaml"
if "$lockstep" run "$work/doomed.yaml" --timeout 120 >"$work/bad.out" 2>&1; then
  fail "lockstep run exited 0 for a failed job"
fi
grep -q "WorkerExitedWithCode3" "$work/bad.out" || fail "no reason: $(cat "$work/bad.out")"
grep -q "doomed-worker-0" "$work/bad.out" || fail "no culprit: $(cat "$work/bad.out")"

# A worker exiting 137 once (retryable) with recovery: RestartGroup: group restart, attempt 1,
# then success.
marker="$work/crashed-once"
shell_job flaky "test \$LOCKSTEP_ATTEMPT = 1 || sleep 30" \
  "test -e $marker || { touch $marker; exit 137; }; sleep 30" |
  sed 's/runPolicy: {backoffLimit: 2}/runPolicy: {backoffLimit: 2, recovery: RestartGroup}/' \
  >"$work/flaky.yaml"
"$lockstep" run "$work/flaky.yaml" --timeout 120 >"$work/flaky.out" 2>&1 ||
  fail "lockstep run exited $? for a job that should recover: $(cat "$work/flaky.out")"
[[ $(k get tj flaky -o jsonpath='{.status.restartCount}/{.status.attempt}') == 1/1 ]] ||
  fail "want one restart and attempt 1: $(k get tj flaky -o yaml)"
expect "WorkerExitedWithCode137" k get events --field-selector involvedObject.name=flaky

# The same with in-place recovery (MultiWorkerMirrored's default): the worker's pod alone is
# recreated, as incarnation 1 of attempt 0, while the chief keeps running (it waits for it).
inc="$work/incarnation"
shell_job inplace "for i in \$(seq 300); do test -e $inc-1 && exit 0; sleep 0.1; done; exit 1" \
  "touch $inc-\$LOCKSTEP_ATTEMPT-\$LOCKSTEP_INCARNATION; test -e $inc-0-0.done || { touch $inc-0-0.done; exit 137; }; touch $inc-\$LOCKSTEP_INCARNATION; sleep 30" \
  >"$work/inplace.yaml"
"$lockstep" run "$work/inplace.yaml" --timeout 120 >"$work/inplace.out" 2>&1 ||
  fail "lockstep run exited $? for an in-place job: $(cat "$work/inplace.out")"
[[ $(k get tj inplace -o jsonpath='{.status.restartCount}/{.status.attempt}') == 1/0 ]] ||
  fail "want one restart at attempt 0: $(k get tj inplace -o yaml)"
[[ -e $inc-0-1 && ! -e $inc-1-0 ]] || fail "the worker was not incarnation 1 of attempt 0: $(ls "$work")"
expect "restarting the pod alone" k get events --field-selector involvedObject.name=inplace

# A worker whose ConfigMap volume names nothing cannot start: the job says so at once (Stalled
# with the kubelet's reason, an event), then fails with it after runPolicy.pendingTimeoutSeconds.
cat >"$work/noconfig.yaml" <<'YAML'
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: noconfig}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: main
              image: debian:bookworm-slim
              command: ["/bin/sh", "-c", "sleep 30"]
              volumeMounts: [{name: settings, mountPath: /etc/settings}]
          volumes: [{name: settings, configMap: {name: settings}}]
  runPolicy: {pendingTimeoutSeconds: 6}
YAML
k apply -f "$work/noconfig.yaml" >/dev/null
said=""
for _ in $(seq 100); do
  said=$(k get tj noconfig -o jsonpath='{.status.conditions[?(@.type=="Stalled")].reason}' 2>/dev/null || true)
  [[ $said == CreateContainerConfigError ]] && break
  sleep 0.1
done
[[ $said == CreateContainerConfigError ]] || fail "not said within 10 s: $(k get tj noconfig -o yaml)"
expect 'configmap "settings" not found' k get events --field-selector involvedObject.name=noconfig
for _ in $(seq 300); do
  [[ $(k get tj noconfig -o jsonpath='{.status.state}') == Failed ]] && break
  sleep 0.1
done
[[ $(k get tj noconfig -o jsonpath='{.status.conditions[?(@.type=="Failed")].reason}') == \
   *CreateContainerConfigError ]] || fail "not failed with the reason: $(k get tj noconfig -o yaml)"

# A worker that keeps failing: past the 25 events a job may have at once, the terminal reason
# is still recorded (it was dropped by the spam filter, and kubectl describe ended on a restart).
shell_job churn "sleep 60" "sleep 0.2; exit 137" |
  sed 's/runPolicy: {backoffLimit: 2}/runPolicy: {backoffLimit: 12}/' >"$work/churn.yaml"
if "$lockstep" run "$work/churn.yaml" --timeout 120 >"$work/churn.out" 2>&1; then
  fail "a job over its backoffLimit succeeded: $(cat "$work/churn.out")"
fi
recorded=$(k get events --field-selector involvedObject.name=churn -o jsonpath='{range .items[*]}{.count}{"\n"}{end}' |
  awk '{ n += $1 } END { print n }')
(( recorded > 25 )) || fail "only $recorded events recorded: the test no longer passes the spam filter's burst"
expect "BackoffLimitExceeded" k get events --field-selector involvedObject.name=churn,reason=BackoffLimitExceeded

# An invalid manifest is refused before anything is sent.
sed 's/replicas: 2/replicas: -1/; s/name: tf-config-check/name: invalid/' \
  "$src/examples/tf-config-check.yaml" >"$work/invalid.yaml"
if "$lockstep" run "$work/invalid.yaml" >"$work/invalid.out" 2>&1; then fail "invalid manifest accepted"; fi
grep -q "replicas" "$work/invalid.out" || fail "no field named: $(cat "$work/invalid.out")"
k get tj invalid >/dev/null 2>&1 && fail "the invalid job was created"
echo "PASS"
