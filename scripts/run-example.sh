#!/usr/bin/env bash
# The main job: installs, builds, and runs an example TrainingJob on one machine through
# `lockstep local` (its API server, the TrainingJob controller in-process, and the process
# runner, which runs the lockstep/trainer image as the locally built lockstep-trainer) to
# Succeeded, with `lockstep run`, then prints its result: the job's own figures from its
# status, and the final lines of the replica that evaluates (the chief, else worker 0).
#
# The default, examples/single-worker.yaml, trains the MLP on Fashion-MNIST for one epoch with
# the OneDevice strategy; any other example may be named instead.
set -euo pipefail
cd "$(dirname "$0")/.."
manifest=${1:-examples/single-worker.yaml}

./scripts/install-deps.sh --build
# The three programs the job runs, for the CPU (the example trains there): LOCKSTEP_CUDA=ON
# builds the GPU code as well. Unity batches and no debug information, as the test suite's
# fresh build; an existing build/release keeps its own settings for what is not named here.
LOCKSTEP_CUDA=${LOCKSTEP_CUDA:-OFF} LOCKSTEP_UNITY=${LOCKSTEP_UNITY:-ON} \
  LOCKSTEP_BENCHMARKS=${LOCKSTEP_BENCHMARKS:-OFF} LOCKSTEP_DEBUG_INFO=${LOCKSTEP_DEBUG_INFO:-0} \
  ./scripts/build.sh lockstep lockstep-operator lockstep-trainer

lockstep=build/release/operator/lockstep
validated=$("$lockstep" validate "$manifest")
echo "$validated"
job=$(sed -n 's|^.*: trainingjob/\(.*\) is valid$|\1|p' <<<"$validated" | head -1)
# A state directory of its own, and the local cluster stopped afterwards.
export LOCKSTEP_HOME=${LOCKSTEP_HOME:-$(mktemp -d)}
trap '"$lockstep" local down >/dev/null 2>&1 || true' EXIT
"$lockstep" run "$manifest" --timeout 1200
[[ -n $job ]] || exit 0
k() { kubectl --kubeconfig "$LOCKSTEP_HOME/kubeconfig" "$@"; }

# The job's figures, from its status. The operator copies status.progress from the chief's
# (else worker 0's) GET /progress every 2 s while it runs: the last reading may be from a
# little before the end. Its loss and accuracy are training figures (moving averages).
fields='{.metadata.namespace}|{.status.state}|{.status.startTime}|{.status.completionTime}'
fields+='|{.status.restartCount}|{.status.progress.step}|{.status.progress.totalSteps}'
fields+='|{.status.progress.epoch}|{.status.progress.loss}|{.status.progress.metrics.accuracy}'
fields+='|{.status.progress.samplesPerSecond}|{.spec.replicaSpecs.Chief.replicas}'
status=$(k get trainingjobs -A -o jsonpath="{range .items[?(@.metadata.name==\"$job\")]}$fields{\"\\n\"}{end}" |
  head -1) || true
if [[ -z $status ]]; then
  echo "trainingjob $job: its status could not be read" >&2
  exit 0
fi
IFS='|' read -r ns state start end restarts step total epoch loss acc rate chiefs <<<"$status"
seconds=""
if [[ -n $start && -n $end ]]; then
  seconds=$(($(date -d "$end" +%s) - $(date -d "$start" +%s)))
fi
echo
echo "result of trainingjob $ns/$job (from its status):"
echo "  $state${seconds:+ in $seconds s}, ${restarts:-0} restart(s)"
if [[ -n $step ]]; then
  line="  last progress reading: step $step${total:+/$total}${epoch:+, epoch $epoch}"
  [[ -n $loss ]] && line+=$(printf ', training loss %.4f' "$loss")
  [[ -n $acc ]] && line+=$(printf ', training accuracy %.4f' "$acc")
  [[ -n $rate ]] && line+=$(printf ', %.0f samples/s' "$rate")
  echo "$line"
else
  echo "  no training progress in its status (its containers do not serve GET /progress)"
fi

# The test set is evaluated by one replica, the chief (else worker 0): its final lines are the
# result. The other trainers end by saying that they do not evaluate.
if [[ ${chiefs:-0} -gt 0 ]]; then who="the chief"; pod=$job-chief-0; else who="worker 0"; pod=$job-worker-0; fi
if log=$(k logs -n "$ns" "$pod" 2>/dev/null); then
  echo "$who's last lines ($pod):"
  { grep -E '^(final test accuracy|steady training samples/s): ' <<<"$log" || tail -2 <<<"$log"; } |
    sed 's/^/  /'
else
  echo "$who's log ($pod) is gone"
fi
