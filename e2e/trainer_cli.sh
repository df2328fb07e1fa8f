#!/usr/bin/env bash
# lockstep-trainer as the operator sees it: exit codes and termination messages for bad
# configuration and bad data, /progress while it trains, SIGTERM -> checkpoint -> exit 143,
# resume from that checkpoint (not from step 0), TensorBoard event files that an independent
# reader decodes, the user's data formats, the trained model exported for Keras and loaded back
# (--initial-weights), and a real Fashion-MNIST run that reaches a sane accuracy.
# Usage: trainer_cli.sh TRAINER_BINARY
set -euo pipefail
trainer=$1
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export LOCKSTEP_TERMINATION_LOG=$work/termination
export LOCKSTEP_POD_IP=127.0.0.1

# run WANT_CODE ARGS...: the trainer must exit with WANT_CODE.
run() {
  local want=$1; shift
  local code=0
  "$trainer" "$@" >"$work/out" 2>&1 || code=$?
  [[ $code == "$want" ]] || fail "exit $code, want $want for $*: $(tail -3 "$work/out")"
}
term_has() { grep -q -- "$1" "$work/termination" || fail "termination message lacks '$1': $(cat "$work/termination")"; }

run 2 --epochs=0
term_has '"reason":"BadConfig"'; term_has '"retryable":false'; term_has '--epochs'
TF_CONFIG='{"cluster":' run 2 --metrics-port=0
term_has 'TF_CONFIG'
run 3 --data-dir="$work/nowhere" --metrics-port=0
term_has '"reason":"BadData"'; term_has 'train-images-idx3-ubyte'
two_workers='{"cluster":{"worker":["localhost:1","localhost:2"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
LOCKSTEP_STRATEGY=Mirrored TF_CONFIG=$two_workers run 2 --metrics-port=0
term_has 'use MultiWorkerMirrored'
LOCKSTEP_STRATEGY=Bogus run 2 --metrics-port=0
term_has 'is not one of'
# A MultiWorkerMirrored worker whose coordinator never answers gives up (setup waits ten
# peer timeouts) with a retryable PeerLost, never hanging.
LOCKSTEP_STRATEGY=MultiWorkerMirrored TF_CONFIG=$two_workers LOCKSTEP_JOB_TOKEN=t \
  run 128 --metrics-port=0 --dataset=synthetic --peer-timeout=1
term_has '"reason":"PeerLost"'; term_has '"retryable":true'

# A metrics port that is taken: named with --metrics-port (or in a pod, where the operator polls
# it), a retryable PortUnavailable; the default port in a run by hand, a warning, and the run
# goes on. hold PORT: a listening socket of this test's own on PORT (0: any free one), its pid
# in $holder; $work/held says its port once it listens, or "taken" when PORT is another's.
hold() {
  rm -f "$work/held"
  /usr/bin/python3 -c '
import os, socket, sys, time
s = socket.socket()
try:
    s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(); held = str(s.getsockname()[1])
except OSError:
    held = "taken"
open(sys.argv[2] + ".tmp", "w").write(held); os.rename(sys.argv[2] + ".tmp", sys.argv[2])
if held != "taken": time.sleep(600)' "$1" "$work/held" >/dev/null &
  holder=$!
  for _ in $(seq 100); do [[ -s $work/held ]] && break; sleep 0.1; done
}
hold 0
port=$(cat "$work/held")
run 128 --metrics-port="$port" --dataset=synthetic --synthetic-size=256 --steps=2
term_has '"reason":"PortUnavailable"'; term_has '"retryable":true'
LOCKSTEP_JOB_NAME=j run 128 --metrics-port="$port" --dataset=synthetic --synthetic-size=256 --steps=2
kill "$holder"
# The default port: held by this test when it is free (else another process holds it: the same
# case as long as it keeps it, so the run is not judged).
hold 9464
if [[ $(cat "$work/held") != taken ]]; then
  run 0 --dataset=synthetic --synthetic-size=256 --steps=2
  grep -q 'training without /progress and /metrics' "$work/out" ||
    fail "no warning for the default port taken: $(cat "$work/out")"
  kill "$holder"
else
  echo "port 9464 is held by another process: the default-port case is not checked this run"
fi

# TensorBoard under AIP_TENSORBOARD_LOG_DIR (as Vertex AI sets it): 2 epochs of 10 steps, a
# step recorded every 4; the runs read back by trainer/summary/testdata/read_events.py (CRCs
# recomputed, tensorflow.Event decoded with python3-protobuf).
AIP_TENSORBOARD_LOG_DIR=$work/tb run 0 --dataset=synthetic --synthetic-size=640 --batch-size=64 \
  --epochs=2 --tensorboard-every=4 --metrics-port=0
grep -q "events in $work/tb/train" "$work/out" || fail "no TensorBoard log line: $(cat "$work/out")"
if /usr/bin/python3 -c 'import crcmod, google.protobuf' 2>/dev/null; then
  /usr/bin/python3 - "$src/trainer/summary/testdata/read_events.py" "$work/tb" <<'EOF' ||
import glob, json, math, subprocess, sys
reader, root = sys.argv[1], sys.argv[2]
def run(name):
    files = glob.glob(root + "/" + name + "/events.out.tfevents.*")
    assert len(files) == 1, (name, files)
    events = json.loads(subprocess.check_output([sys.executable, reader, files[0]]))
    assert events[0]["file_version"] == "brain.Event:2", events[0]
    return [(e["step"], e["scalars"]) for e in events[1:]]
train = run("train")
steps = [s for s, v in train if "batch_loss" in v]
assert steps == [4, 8, 12, 16, 20], steps
for s, v in train:
    if "batch_loss" in v:
        assert set(v) == {"batch_loss", "batch_accuracy", "learning_rate", "samples_per_second"}, v
        assert all(math.isfinite(x) for x in v.values()) and v["samples_per_second"] > 0, v
epochs = [(s, v) for s, v in train if "epoch_loss" in v]
assert [s for s, _ in epochs] == [0, 1], epochs
assert all(0 <= v["epoch_accuracy"] <= 1 for _, v in epochs), epochs
validation = run("validation")
assert [s for s, _ in validation] == [0, 1], validation
assert validation[1][1]["epoch_accuracy"] > 0.5, validation  # the synthetic task is learnable
EOF
    fail "the TensorBoard runs are not as recorded"
else
  echo "skip: the TensorBoard reader needs python3-crcmod and python3-protobuf"
fi

# The user's TFRecord files: tf.train.Example records written by an independent writer (no
# TensorFlow: the Example message declared from its field numbers), four gzip files, a data spec
# holding out a tenth for validation; then a glob that matches nothing (bad data, exit 3).
if /usr/bin/python3 -c 'import crcmod, google.protobuf, numpy' 2>/dev/null; then
  mkdir -p "$work/records"
  /usr/bin/python3 "$src/trainer/data/testdata/write_examples.py" "$work/records" 4 400 784 10 \
    gzip >/dev/null || fail "write_examples.py failed"
  cat >"$work/spec.json" <<EOF
{"format": "tfrecord", "files": "$work/records/part-*.tfrecord.gz", "validation_split": 0.1,
 "features": {"x": {"dtype": "float32", "shape": [784]}, "y": {"dtype": "int64"}},
 "input": "x", "label": "y"}
EOF
  run 0 --data-spec="$work/spec.json" --epochs=2 --batch-size=48 --metrics-port=0
  grep -q "1600 records from 4 file(s)" "$work/out" || fail "records not read: $(cat "$work/out")"
  grep -q "1440 training examples" "$work/out" || fail "no validation split: $(cat "$work/out")"
  acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out")
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || fail "TFRecord run: validation accuracy $acc < 0.9"
  sed -e 's/part-\*/nothing-*/' "$work/spec.json" >"$work/empty.json"
  run 3 --data-spec="$work/empty.json" --metrics-port=0
  term_has '"reason":"BadData"'; term_has 'no file matches'
  # NumPy arrays as keras.datasets ships them (uint8 images, an .npz), scaled by the spec.
  /usr/bin/python3 - "$work/arrays.npz" <<'EOF'
import sys
import numpy as np
rng = np.random.default_rng(4)
proto = rng.integers(0, 256, (10, 28, 28))
def split(n):
    y = rng.integers(0, 10, n)
    x = np.clip(proto[y] + rng.normal(0, 40, (n, 28, 28)), 0, 255).astype(np.uint8)
    return x, y.astype(np.uint8)
(xt, yt), (xv, yv) = split(1200), split(300)
np.savez_compressed(sys.argv[1], x_train=xt, y_train=yt, x_test=xv, y_test=yv)
EOF
  a=$work/arrays.npz
  printf '{"format": "numpy", "x": "%s:x_train", "y": "%s:y_train", "validation_x": "%s:x_test", "validation_y": "%s:y_test", "input_scale": 0.00392156862745098}' \
    "$a" "$a" "$a" "$a" >"$work/numpy.json"
  run 0 --data-spec="$work/numpy.json" --epochs=2 --batch-size=48 --metrics-port=0
  grep -q "1200 examples from $a:x_train" "$work/out" || fail "arrays not read: $(cat "$work/out")"
  acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out")
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || fail "NumPy run: validation accuracy $acc < 0.9"
  # CSV: a table with string labels (through a vocabulary) for a small Keras model file.
  /usr/bin/python3 - "$work" <<'EOF'
import csv, random, sys
rng = random.Random(6)
proto = {"setosa": [5.0, 3.4, 1.5, 0.2], "versicolor": [5.9, 2.8, 4.3, 1.3],
         "virginica": [6.6, 3.0, 5.6, 2.0]}
for name, n in (("train", 300), ("val", 60)):
    with open(sys.argv[1] + "/" + name + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sepal_length", "sepal_width", "petal_length", "petal_width", "species"])
        for _ in range(n):
            s = rng.choice(sorted(proto))
            w.writerow(["%.2f" % (v + rng.gauss(0, 0.2)) for v in proto[s]] + [s])
EOF
  cat >"$work/iris.json" <<'EOF'
{"class_name": "Sequential", "config": {"name": "iris", "layers": [
  {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4]}},
  {"class_name": "Dense", "config": {"name": "hidden", "units": 16, "activation": "relu"}},
  {"class_name": "Dense", "config": {"name": "out", "units": 3, "activation": "softmax"}}]}}
EOF
  printf '{"format": "csv", "files": "%s/train.csv", "validation_files": "%s/val.csv", "label": "species", "label_vocabulary": ["setosa", "versicolor", "virginica"]}' \
    "$work" "$work" >"$work/csv.json"
  run 0 --data-spec="$work/csv.json" --model="$work/iris.json" --epochs=20 --batch-size=30 \
    --learning-rate=0.01 --metrics-port=0
  grep -q "300 rows from 1 file(s)" "$work/out" || fail "CSV not read: $(cat "$work/out")"
  acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out")
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.85) }' || fail "CSV run: validation accuracy $acc < 0.85"
  # Images by class folder: 28x28 PNGs of three patterns, some as JPEG, for the built-in mlp.
  if /usr/bin/python3 -c 'import PIL' 2>/dev/null; then
    /usr/bin/python3 - "$work/images" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(8)
proto = {name: rng.integers(0, 256, (28, 28)) for name in ("circle", "square", "triangle")}
for split, n in (("train", 120), ("val", 30)):
    for name, p in proto.items():
        os.makedirs("%s/%s/%s" % (sys.argv[1], split, name), exist_ok=True)
        for i in range(n):
            img = Image.fromarray(np.clip(p + rng.normal(0, 30, (28, 28)), 0, 255).astype(np.uint8))
            ext = "jpg" if i % 4 == 0 else "png"
            img.save("%s/%s/%s/%03d.%s" % (sys.argv[1], split, name, i, ext), quality=95)
EOF
    printf '{"format": "images", "directory": "%s/train", "validation_directory": "%s/val", "input_scale": 0.00392156862745098}' \
      "$work/images" "$work/images" >"$work/images.json"
    run 0 --data-spec="$work/images.json" --epochs=3 --batch-size=30 --metrics-port=0
    grep -q "360 images of 3 classes (circle, square, triangle)" "$work/out" ||
      fail "images not read: $(cat "$work/out")"
    acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out")
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || fail "images run: validation accuracy $acc < 0.9"
  else
    echo "skip: the image writer needs python3-pil"
  fi
else
  echo "skip: the TFRecord and NumPy writers need python3-crcmod, python3-protobuf and numpy"
fi

# Models of other shapes on the user's NumPy arrays (examples/models/): a regression (no loss
# in the file: its linear Dense(1) is one), a two-input, two-output model fed by the model's
# input and output names, and an autoencoder whose target is its input.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - "$work" <<'EOF'
import sys
import numpy as np
rng = np.random.default_rng(3)
d = sys.argv[1]
x = rng.normal(size=(400, 8)).astype(np.float32)
y = (x @ rng.normal(size=(8, 1)) + 0.1 * rng.normal(size=(400, 1))).astype(np.float32)
np.savez(d + "/regression.npz", x=x, y=y, w=rng.uniform(0.5, 1.5, size=400).astype(np.float32))
image = rng.normal(size=(400, 8, 8, 1)).astype(np.float32)
meta = rng.normal(size=(400, 4)).astype(np.float32)
label = (image.mean(axis=(1, 2, 3)) > 0).astype(np.int64) + (meta[:, 0] > 0)
score = meta.sum(axis=1, keepdims=True).astype(np.float32)
np.savez(d + "/two.npz", image=image, meta=meta, label=label, score=score)
np.save(d + "/pixels.npy", rng.uniform(size=(200, 8, 8, 1)).astype(np.float32))
EOF
  printf '{"format": "numpy", "x": "%s/regression.npz:x", "y": "%s/regression.npz:y", "sample_weight": "%s/regression.npz:w", "validation_split": 0.2}' \
    "$work" "$work" "$work" >"$work/regression.json"
  run 0 --data-spec="$work/regression.json" --model="$src/examples/models/regression.json" \
    --epochs=30 --batch-size=32 --learning-rate=0.01 --metrics-port=0
  grep -q "output 'price' \[1\] trains with mean_squared_error: no loss in the file" "$work/out" ||
    fail "regression loss not inferred: $(cat "$work/out")"
  loss=$(sed -n 's/^final test loss: \([0-9.]*\).*/\1/p' "$work/out")
  awk -v l="$loss" 'BEGIN { exit !(l != "" && l < 1.0) }' || fail "regression: test loss '$loss' >= 1 (the targets' variance is about 8)"
  printf '{"format": "numpy", "x": {"meta": "%s/two.npz:meta", "image": "%s/two.npz:image"}, "y": {"score": "%s/two.npz:score", "label": "%s/two.npz:label"}, "validation_split": 0.25}' \
    "$work" "$work" "$work" "$work" >"$work/two.json"
  run 0 --data-spec="$work/two.json" --model="$src/examples/models/two_tower.json" --epochs=10 \
    --batch-size=25 --metrics-port=0
  grep -q "output 'score' \[1\] trains with mean_squared_error, weight 0.5" "$work/out" ||
    fail "two-output losses: $(cat "$work/out")"
  grep -q "^final test accuracy:" "$work/out" || fail "two-output run: $(tail -3 "$work/out")"
  printf '{"format": "numpy", "x": "%s/pixels.npy", "target": "input", "validation_split": 0.1}' "$work" \
    >"$work/ae.json"
  run 0 --data-spec="$work/ae.json" --model="$src/examples/models/autoencoder.json" --epochs=2 \
    --batch-size=20 --metrics-port=0
  grep -q "^final test" "$work/out" || fail "autoencoder run: $(tail -3 "$work/out")"
  # Targets that do not fit the model: named, exit 2.
  printf '{"format": "numpy", "x": "%s/two.npz:image", "y": "%s/two.npz:score"}' "$work" "$work" \
    >"$work/misfit.json"
  run 2 --data-spec="$work/misfit.json" --model="$src/examples/models/two_tower.json" --metrics-port=0
  term_has "the model has 2 inputs ('image', 'meta')"
else
  echo "skip: the model-shape runs need numpy"
fi
# A model or batch larger than memory is refused by size (exit 2), not killed; a truncated model
# file says where it ends.
run 2 --model="$src/examples/models/unet.json" --dataset=synthetic --batch-size=100000000 \
  --metrics-port=0
term_has '"reason":"BadConfig"'; term_has 'needs about'; term_has 'lower --batch-size'
head -c 300 "$src/examples/models/unet.json" >"$work/cut.json"
run 2 --model="$work/cut.json" --dataset=synthetic --metrics-port=0
term_has 'not JSON at line'

# The trained model out, under AIP_MODEL_DIR (as Vertex AI sets it): the chief writes
# model.keras, model.h5 and model.onnx for the mlp's Keras config, which h5py and the onnx
# checker read back; a run started
# from either (--initial-weights, one step at a vanishing learning rate) has the trained
# model's accuracy, where the same step from the seed's weights is at chance.
mlp_json=$src/examples/models/mlp.json
final_accuracy() { sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out"; }
AIP_MODEL_DIR=$work/model run 0 --model="$mlp_json" --dataset=synthetic --synthetic-size=2000 \
  --batch-size=50 --epochs=2 --metrics-port=0
[[ -f $work/model/model.keras && -f $work/model/model.h5 && -f $work/model/model.onnx ]] ||
  fail "no export: $(cat "$work/out")"
if grep -q tmp <<<"$(ls -a "$work/model")"; then fail "temporary export files left: $(ls -a "$work/model")"; fi
trained=$(final_accuracy)
for weights in "$work/model/model.keras" "$work/model/model.h5" ""; do
  run 0 --model="$mlp_json" --dataset=synthetic --synthetic-size=2000 --batch-size=50 --steps=1 \
    --learning-rate=1e-9 --metrics-port=0 ${weights:+--initial-weights="$weights"}
  acc=$(final_accuracy)
  if [[ -n $weights ]]; then
    awk -v a="$acc" -v t="$trained" 'BEGIN { exit !(a >= t - 0.01) }' ||
      fail "started from $weights: accuracy $acc, the trained model's $trained"
  else
    awk -v a="$acc" 'BEGIN { exit !(a < 0.5) }' || fail "from the seed: accuracy $acc, not chance"
  fi
done
run 2 --model="$mlp_json" --initial-weights="$work/model/nothing.h5" --metrics-port=0
term_has '"reason":"BadConfig"'; term_has 'nothing.h5'
# The built-in mlp is examples/models/mlp.json: it starts from that file's trained weights too.
run 0 --initial-weights="$work/model/model.h5" --dataset=synthetic --synthetic-size=2000 \
  --batch-size=50 --steps=1 --learning-rate=1e-9 --metrics-port=0
acc=$(final_accuracy)
awk -v a="$acc" -v t="$trained" 'BEGIN { exit !(a >= t - 0.01) }' ||
  fail "--model=mlp started from the trained mlp.json's weights: accuracy $acc, not $trained"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  /usr/bin/python3 - "$work/model" <<'EOF' || fail "h5py could not read the export"
import io, json, sys, zipfile
import h5py
d = sys.argv[1]
with zipfile.ZipFile(d + "/model.keras") as z:
    assert sorted(z.namelist()) == ["config.json", "metadata.json", "model.weights.h5"], z.namelist()
    assert json.loads(z.read("config.json"))["class_name"] in ("Sequential", "Functional")
    with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
        layers = f["layers"]
        kernels = sorted(k for k in layers if "vars" in layers[k] and "0" in layers[k]["vars"])
        assert kernels == ["dense", "dense_1", "dense_2"], kernels
        assert f["layers/dense/vars/0"].shape == (784, 256), f["layers/dense/vars/0"].shape
with h5py.File(d + "/model.h5", "r") as f:
    names = [n.decode() for n in f.attrs["layer_names"]]
    with_weights = [n for n in names if len(f[n].attrs["weight_names"])]
    assert len(with_weights) == 3, names
EOF
else
  echo "skip: reading the export needs python3-h5py"
fi
if /usr/bin/python3 -c 'import onnx, torch' 2>/dev/null; then
  /usr/bin/python3 "$src/trainer/model/testdata/onnx_peer.py" check "$work/model/model.onnx" \
    >"$work/onnx.json" || fail "model.onnx does not pass the onnx checker"
  grep -q '"output_shapes": \[\["batch", 10\]\]' "$work/onnx.json" || fail "model.onnx: $(cat "$work/onnx.json")"
else
  echo "skip: checking model.onnx needs python3-onnx"
fi

# SIGTERM mid-run: a checkpoint, exit 143, a retryable termination message.
port=$((20000 + RANDOM % 20000))
"$trainer" --dataset=synthetic --synthetic-size=20000 --steps=100000 --batch-size=32 \
  --checkpoint-dir="$work/ckpt" --checkpoint-every=1000000 --metrics-port=$port \
  >"$work/long.out" 2>&1 &
pid=$!
get_progress() {
  (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /progress HTTP/1.0\r\n\r\n' >&3 &&
    cat <&3) 2>/dev/null || true
}
progress=""
for _ in $(seq 300); do
  progress=$(get_progress)
  [[ $progress =~ \"step\":([0-9]+) ]] && (( BASH_REMATCH[1] > 50 )) && break
  sleep 0.1
done
[[ $progress == *'"totalSteps":100000'* ]] || fail "no progress: $progress"
kill -TERM $pid
code=0; wait $pid || code=$?
[[ $code == 143 ]] || fail "SIGTERM: exit $code, want 143: $(tail -3 "$work/long.out")"
term_has '"reason":"Terminated"'; term_has '"retryable":true'
ls "$work/ckpt"/ckpt-*.lsc >/dev/null || fail "no checkpoint written on SIGTERM"

# Resume: the run goes on from the checkpoint's step, not from 0.
saved=$(ls "$work/ckpt" | sed 's/ckpt-0*//; s/\.lsc//' | tail -1)
run 0 --dataset=synthetic --synthetic-size=20000 --batch-size=32 --checkpoint-dir="$work/ckpt" \
  --metrics-port=0 --steps=$((saved + 20))
grep -q "resumed from step $saved " "$work/out" || fail "did not resume: $(head -3 "$work/out")"
grep -q "final test accuracy" "$work/out" || fail "no final accuracy line"

# A corrupt newest checkpoint is skipped with a warning.
newest=$(ls "$work/ckpt"/ckpt-*.lsc | tail -1)
printf 'garbage' >"$newest"
run 0 --dataset=synthetic --synthetic-size=20000 --batch-size=32 --checkpoint-dir="$work/ckpt" \
  --metrics-port=0 --steps=$((saved + 21))
grep -q " W checkpoint] skipping checkpoint" "$work/out" || fail "corrupt checkpoint not reported"

# Real data: one epoch of the mlp on Fashion-MNIST (5 epochs reach 89%; see docs/reference/trainer.md).
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  run 0 --model=mlp --epochs=1 --metrics-port=0
  acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out")
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.83) }' || fail "mlp after one epoch: accuracy $acc < 0.83"
  grep -q "steady training samples/s: [1-9]" "$work/out" || fail "no throughput line"
fi
echo "PASS"
