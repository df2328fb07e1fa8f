#!/usr/bin/env bash
# `lockstep validate` accepts every example and rejects a broken manifest, naming the field;
# every command answers --help, and bad arguments are named.
set -euo pipefail
lockstep=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$lockstep" validate "$src"/examples/*.yaml

# A misspelt field is reported with its path.
sed -e 's/^  runPolicy:/  runPolicyy:/' "$src/examples/multi-worker-mirrored.yaml" >"$tmp/bad.yaml"
if "$lockstep" validate "$tmp/bad.yaml" 2>"$tmp/err"; then
  echo "FAIL: an invalid manifest was accepted"; exit 1
fi
grep -q 'spec.runPolicyy: Unknown field' "$tmp/err" || { echo "FAIL: unknown field not named"; cat "$tmp/err"; exit 1; }

printf 'apiVersion: lockstep.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\nspec:\n  replicaSpecs:\n    Chief: {replicas: 2, template: {spec: {containers: [{name: a, image: b}]}}}\n' >"$tmp/chief.yaml"
if "$lockstep" validate "$tmp/chief.yaml" 2>"$tmp/err"; then
  echo "FAIL: two chiefs were accepted"; exit 1
fi
grep -q 'spec.replicaSpecs.Chief.replicas: Too many: 2' "$tmp/err" || { echo "FAIL: chief count not named"; cat "$tmp/err"; exit 1; }

# A Kubeflow v1 TFJob is checked as the operator serves it; an older one is named as one, with
# what to change, not "no TrainingJob".
sed -e 's|^apiVersion: lockstep.io/v1alpha1|apiVersion: kubeflow.org/v1|' -e 's/^kind: TrainingJob/kind: TFJob/' \
  -e 's/^  replicaSpecs:/  tfReplicaSpecs:/' "$src/examples/kubeflow-tfjob.yaml" >"$tmp/tfjob.yaml"
grep -q 'tfjob/tf-dist-mnist is a valid Kubeflow TFJob: it runs unchanged' <<<"$("$lockstep" validate "$tmp/tfjob.yaml")" ||
  { echo "FAIL: a valid v1 TFJob"; exit 1; }
sed -e 's/name: tensorflow/name: main/' "$tmp/tfjob.yaml" >"$tmp/unnamed.yaml"
if "$lockstep" validate "$tmp/unnamed.yaml" 2>"$tmp/err"; then
  echo "FAIL: a TFJob without a tensorflow container was accepted"; exit 1
fi
grep -q 'spec.tfReplicaSpecs.PS.template.spec.containers: Required value: must have at least one container with name tensorflow' "$tmp/err" ||
  { echo "FAIL: the missing tensorflow container was not named"; cat "$tmp/err"; exit 1; }
sed -e 's|^apiVersion: kubeflow.org/v1|apiVersion: kubeflow.org/v1beta2|' "$tmp/tfjob.yaml" >"$tmp/beta.yaml"
if "$lockstep" validate "$tmp/beta.yaml" 2>"$tmp/err"; then
  echo "FAIL: a v1beta2 TFJob was accepted"; exit 1
fi
grep -q 'is a Kubeflow TFJob (kubeflow.org/v1beta2), not a TrainingJob: rename apiVersion to lockstep.io/v1alpha1' "$tmp/err" &&
  ! grep -q 'no TrainingJob' "$tmp/err" || { echo "FAIL: the TFJob was not named"; cat "$tmp/err"; exit 1; }
# `lockstep convert` rewrites it; the TrainingJob made validates and is the example itself.
"$lockstep" convert "$tmp/tfjob.yaml" >"$tmp/converted.yaml" 2>"$tmp/changes" ||
  { echo "FAIL: lockstep convert"; cat "$tmp/changes"; exit 1; }
grep -q 'kind TFJob -> TrainingJob, spec.tfReplicaSpecs -> spec.replicaSpecs' "$tmp/changes" ||
  { echo "FAIL: the changes were not said"; cat "$tmp/changes"; exit 1; }
"$lockstep" validate "$tmp/converted.yaml" >/dev/null
# (Captured first: under pipefail, grep -q quitting early could SIGPIPE the writer.)
grep -q '^kind: TFJob$' <<<"$("$lockstep" convert --to=v1 "$tmp/tfjob.yaml" 2>/dev/null)" ||
  { echo "FAIL: lockstep convert --to=v1"; exit 1; }
rc=0; "$lockstep" convert --to=v2 "$tmp/tfjob.yaml" 2>"$tmp/err" >/dev/null || rc=$?
[[ $rc == 2 ]] && grep -q 'unknown argument "--to=v2"' "$tmp/err" || { echo "FAIL: convert --to=v2 (exit $rc)"; exit 1; }

printf 'kind: TrainingJob\nspec: [unclosed\n' >"$tmp/broken.yaml"
if "$lockstep" validate "$tmp/broken.yaml" 2>"$tmp/err"; then
  echo "FAIL: malformed YAML was accepted"; exit 1
fi
grep -q 'malformed YAML' "$tmp/err" || { echo "FAIL: malformed YAML not reported"; cat "$tmp/err"; exit 1; }
# Every command answers --help on stdout with exit 0; `lockstep help CMD` is `CMD --help`.
for cmd in run local validate convert; do
  "$lockstep" "$cmd" --help >"$tmp/help" || { echo "FAIL: lockstep $cmd --help exited $?"; exit 1; }
  grep -q "^usage: lockstep $cmd" "$tmp/help" || { echo "FAIL: lockstep $cmd --help"; cat "$tmp/help"; exit 1; }
  "$lockstep" help "$cmd" | cmp -s - "$tmp/help" || { echo "FAIL: lockstep help $cmd differs"; exit 1; }
done
grep -q 'COMMAND --help' <<<"$("$lockstep" --help)" || { echo "FAIL: the usage does not point to --help"; exit 1; }
# Bad arguments name themselves and exit 2.
rc=0; "$lockstep" run "$src/examples/single-worker.yaml" --timeout 10m 2>"$tmp/err" || rc=$?
[[ $rc == 2 ]] && grep -q -- '--timeout 10m: want a whole number of seconds' "$tmp/err" ||
  { echo "FAIL: a bad --timeout (exit $rc)"; cat "$tmp/err"; exit 1; }
rc=0; "$lockstep" version extra 2>"$tmp/err" || rc=$?
[[ $rc == 2 ]] && grep -q 'unexpected argument "extra"' "$tmp/err" || { echo "FAIL: version extra (exit $rc)"; exit 1; }
echo "e2e_validate_examples: ok"
