#!/usr/bin/env bash
# A user's own Keras model on `lockstep local`:
#  - the keras-model example (a Keras 3 CNN from a ConfigMap, MultiWorkerMirrored, chief +
#    worker) succeeds, trained with the optimizer its compile config names, to a sane accuracy;
#  - a model holding a Lambda layer fails the job at once (exit 2, BadConfig, no restarts), and
#    the job's status names the layer and why.
# Usage: keras_model.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
source "$(dirname "$0")/lib.sh"
accuracy() { k logs "$1" 2>/dev/null | sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p'; }

# 1. The example as shipped.
"$lockstep" run "$src/examples/keras-model.yaml" --timeout 600 >"$work/ok.out" 2>&1 ||
  fail "keras-model example: $(tail -5 "$work/ok.out")"
acc=$(accuracy keras-cnn-chief-0)
awk -v a="$acc" 'BEGIN { exit !(a >= 0.70) }' || fail "keras-model accuracy '$acc' < 0.70"
expect "/model/model.json (" k logs keras-cnn-chief-0
expect "adam lr 0.001" k logs keras-cnn-chief-0
echo "keras-model example: accuracy $acc"

# 2. A Lambda layer: refused before training, the job Failed with the layer named.
cat >"$work/lambda.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: lambda-model}
data:
  model.json: |
    {"class_name": "Sequential", "config": {"name": "s", "layers": [
      {"class_name": "Dense", "config": {"name": "d", "units": 4, "batch_input_shape": [null, 784]}},
      {"class_name": "Lambda", "config": {"name": "scale_by_two", "function": "4wEAAAAA"}}]}}
---
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: lambda-job}
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
              args: ["--model=/model/model.json", "--dataset=synthetic", "--steps=5"]
              volumeMounts: [{name: model, mountPath: /model}]
          volumes: [{name: model, configMap: {name: lambda-model}}]
  runPolicy: {backoffLimit: 3}
YAML
if "$lockstep" run "$work/lambda.yaml" --timeout 120 >"$work/lambda.out" 2>&1; then
  fail "a Lambda model trained: $(tail -3 "$work/lambda.out")"
fi
status=$(k get tj lambda-job -o yaml)
[[ $(k get tj lambda-job -o jsonpath='{.status.state}') == Failed ]] ||
  fail "lambda-job is not Failed: $status"
messages=$(k get tj lambda-job -o jsonpath='{.status.conditions[*].message}')
[[ $messages == *"BadConfig"*"layer 'scale_by_two' (Lambda)"* ]] ||
  fail "the status does not name the Lambda layer: $messages"
restarts=$(k get tj lambda-job -o jsonpath='{.status.replicaStatuses.Worker.restarts}')
[[ ${restarts:-0} == 0 ]] || fail "a configuration error was retried: $status"
echo "e2e_keras_model: ok"
