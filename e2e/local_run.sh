#!/usr/bin/env bash
# `lockstep run`: starts the local cluster when needed, applies the manifest, follows the job
# and exits 0 when it succeeds, 1 when it fails (with the reason) or the manifest is invalid.
# The TrainingJob controller is not part of this test: the test writes the job's status itself,
# as the controller would.
# Usage: local_run.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
source "$(dirname "$0")/lib.sh"
unset KUBECONFIG
k() { KUBECONFIG=$LOCKSTEP_HOME/kubeconfig kubectl "$@"; }

# Waits until `lockstep run` has created the job (the cluster starts first).
await_job() {
  for _ in $(seq 600); do
    k get tj "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "TrainingJob $1 never appeared"
}
set_status() {  # set_status JOB STATE CONDITION REASON MESSAGE
  k patch tj "$1" --subresource=status --type=merge -p "{\"status\":{\"state\":\"$2\",
    \"conditions\":[{\"type\":\"$3\",\"status\":\"True\",\"reason\":\"$4\",\"message\":\"$5\",
    \"lastTransitionTime\":\"2026-11-21T10:00:00Z\"}]}}" >/dev/null
}

# A job that succeeds.
"$lockstep" run "$src/examples/single-worker.yaml" --timeout 120 >"$work/ok.out" 2>&1 &
run=$!
await_job fmnist-single
set_status fmnist-single Running Running PodsRunning "1/1 running"
set_status fmnist-single Succeeded Succeeded AllWorkersSucceeded "worker 0 exited 0"
wait "$run" || fail "lockstep run exited $? for a job that succeeded: $(cat "$work/ok.out")"
grep -q "fmnist-single succeeded" "$work/ok.out" || fail "no success line: $(cat "$work/ok.out")"

# A job that fails: exit code 1 and the reason.
sed 's/name: fmnist-single/name: doomed/' "$src/examples/single-worker.yaml" >"$work/doomed.yaml"
"$lockstep" run "$work/doomed.yaml" --timeout 120 >"$work/bad.out" 2>&1 &
run=$!
await_job doomed
set_status doomed Failed Failed BackoffLimitExceeded "worker 0 exited 1 three times"
if wait "$run"; then fail "lockstep run exited 0 for a failed job"; fi
grep -q "BackoffLimitExceeded" "$work/bad.out" || fail "no reason: $(cat "$work/bad.out")"

# An invalid manifest is refused before anything is sent.
sed 's/replicas: 1/replicas: -1/; s/name: fmnist-single/name: invalid/' \
  "$src/examples/single-worker.yaml" >"$work/invalid.yaml"
if "$lockstep" run "$work/invalid.yaml" >"$work/invalid.out" 2>&1; then fail "invalid manifest accepted"; fi
grep -q "replicas" "$work/invalid.out" || fail "no field named: $(cat "$work/invalid.out")"
k get tj invalid >/dev/null 2>&1 && fail "the invalid job was created"
echo "PASS"
