#!/usr/bin/env bash
# What each optimizer costs a training step, not only its update loop: lockstep-trainer trains
# the `mlp` of examples/models/mlp.json on Fashion-MNIST (batch 64, one thread pinned to core 0)
# with each Keras optimizer written into the model's compile config, and with the trainer's own
# --optimizer=sgd/adam on the built-in `mlp`. The runs alternate, three rounds, and each
# optimizer's median samples/s is reported as the ratio of SGD's step time to its own (1.00 =
# as fast as SGD; the issue's target is every optimizer within 1.1x, i.e. a ratio >= 0.91).
# Usage: bench/optimizer_training.sh [BUILD_DIR]   (ROUNDS=3 STEPS=3000 override)
set -euo pipefail
build=${1:-build/release}
root=$(cd "$(dirname "$0")/.." && pwd)
trainer=$build/trainer/lockstep-trainer
[[ -x $trainer ]] || { echo "missing $trainer (ninja -C $build lockstep-trainer)" >&2; exit 2; }
rounds=${ROUNDS:-3}
steps=${STEPS:-3000}
"$root/bench/blas_info.sh" "$trainer"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One model file per Keras optimizer: mlp.json with a Keras 3 compile_config.
/usr/bin/python3 - "$root/examples/models/mlp.json" "$tmp" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
opts = {
    "sgd": {"learning_rate": 0.01, "momentum": 0.9},
    "sgd_nesterov": {"learning_rate": 0.01, "momentum": 0.9, "nesterov": True},
    "adam": {"learning_rate": 0.001},
    "adamw": {"learning_rate": 0.001, "weight_decay": 0.004},
    "rmsprop": {"learning_rate": 0.001},
    "adagrad": {"learning_rate": 0.01},
    "adam_clipnorm": {"learning_rate": 0.001, "clipnorm": 1.0},
}
for name, cfg in opts.items():
    cls = {"sgd_nesterov": "SGD", "sgd": "SGD", "adam": "Adam", "adamw": "AdamW",
           "rmsprop": "RMSprop", "adagrad": "Adagrad", "adam_clipnorm": "Adam"}[name]
    m = dict(model)
    m["compile_config"] = {"optimizer": {"module": "keras.optimizers", "class_name": cls,
                                         "config": cfg, "registered_name": None},
                           "loss": "sparse_categorical_crossentropy"}
    json.dump(m, open(f"{sys.argv[2]}/{name}.json", "w"))
PY

cases=(builtin:sgd builtin:adam keras:sgd keras:sgd_nesterov keras:adam keras:adamw
  keras:rmsprop keras:adagrad keras:adam_clipnorm)
declare -A rates
for ((r = 1; r <= rounds; r++)); do
  for c in "${cases[@]}"; do
    kind=${c%%:*} opt=${c#*:}
    if [[ $kind == builtin ]]; then
      args=(--model=mlp --optimizer="$opt")
    else
      args=(--model="$tmp/$opt.json")
    fi
    out=$(taskset -c 0 "$trainer" "${args[@]}" --steps="$steps" --lr-schedule=constant \
      --metrics-port=0 2>&1) || { echo "$c failed:" >&2; echo "$out" | tail -3 >&2; exit 1; }
    v=$(echo "$out" | sed -n 's/^steady training samples\/s: //p' | tail -1)
    rates[$c]+="$v "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %12s %12s\n' optimizer samples/s "vs sgd"
for kind in builtin keras; do
  base=$(echo "${rates[$kind:sgd]}" | median)
  for c in "${cases[@]}"; do
    [[ ${c%%:*} == "$kind" ]] || continue
    m=$(echo "${rates[$c]}" | median)
    printf '%-22s %12s %12s\n' "$c" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.2f", a / b}')"
  done
done
