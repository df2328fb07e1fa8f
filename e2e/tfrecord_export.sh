#!/usr/bin/env bash
# The job a user would write (examples/tfrecord-export.yaml) on `lockstep local`: a Keras model
# from a ConfigMap, trained with MultiWorkerMirrored (chief + worker) on Fashion-MNIST written
# as TFRecord files of tf.train.Example on a hostPath volume (split between the workers by
# file), reaches Succeeded with a sane accuracy; the chief writes TensorBoard runs (read back by an independent reader),
# checkpoints, and model.keras, model.h5 and model.onnx (read back by h5py and the onnx checker).
# Usage: tfrecord_export.sh LOCKSTEP_BINARY SOURCE_DIR
set -euo pipefail
lockstep=$1
src=$2
source "$(dirname "$0")/lib.sh"
if ! /usr/bin/python3 -c 'import crcmod, google.protobuf' 2>/dev/null; then
  echo "the TFRecord writer needs python3-crcmod and python3-protobuf: skipping"
  exit 77
fi

# 1. The records: 12,000 training examples in 4 GZIP shards, 2,000 for validation.
fashion=$work/fashion
/usr/bin/python3 "$src/e2e/fashion_tfrecords.py" /usr/share/datasets/fashion-mnist \
  "$fashion/records" 12000 2000 4 || fail "could not write the TFRecord files"

# 2. The example as shipped, its volume pointed at this test's directory.
sed "s|path: /srv/fashion,|path: $fashion,|" "$src/examples/tfrecord-export.yaml" >"$work/job.yaml"
grep -q "path: $fashion," "$work/job.yaml" || fail "the example's hostPath moved"
"$lockstep" run "$work/job.yaml" --timeout 600 >"$work/run.out" 2>&1 ||
  fail "tfrecord-export example: $(tail -5 "$work/run.out")"
chief=$(k logs fashion-records-chief-0 2>&1) || fail "no chief logs: $chief"
# Four training files for two workers: each reads its own two (tf.data's sharding by file).
[[ $chief == *"6000 records from 2 file(s) of /srv/fashion/records/train-*.tfrecord.gz (worker 0 of 2's 2 of 4 files)"* ]] ||
  fail "the chief did not read its half of the records: $chief"
acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' <<<"$chief")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }' || fail "accuracy '$acc' < 0.80"

# 3. What the chief wrote, and only the chief.
out=$fashion/output
[[ -f $out/model/model.keras && -f $out/model/model.h5 && -f $out/model/model.onnx ]] ||
  fail "no model: $(ls -R "$out")"
[[ $chief == *"the trained model: /srv/fashion/output/model/model.keras"* ]] || fail "chief: $chief"
ls "$out/checkpoints"/ckpt-*.lsc >/dev/null || fail "no checkpoints: $(ls -R "$out")"
for run in train validation; do
  files=("$out/logs/$run"/events.out.tfevents.*)
  [[ ${#files[@]} == 1 && -f ${files[0]} ]] || fail "want one event file in logs/$run: $(ls -R "$out/logs")"
  /usr/bin/python3 "$src/trainer/summary/testdata/read_events.py" "${files[0]}" >"$work/$run.json" ||
    fail "logs/$run does not read back"
done
/usr/bin/python3 - "$work/train.json" "$work/validation.json" <<'PY' || fail "TensorBoard runs"
import json, sys
train, validation = (json.load(open(p)) for p in sys.argv[1:])
epochs = [e["step"] for e in train if "epoch_loss" in e.get("scalars", {})]
assert epochs == [0, 1, 2], epochs
accuracy = [e["scalars"]["epoch_accuracy"] for e in validation if "epoch_accuracy" in e.get("scalars", {})]
assert len(accuracy) == 3 and accuracy[-1] > 0.8, accuracy
PY
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  /usr/bin/python3 - "$out/model" <<'PY' || fail "h5py could not read the model"
import io, json, sys, zipfile
import h5py
d = sys.argv[1]
with zipfile.ZipFile(d + "/model.keras") as z:
    config = json.loads(z.read("config.json"))
    assert config["config"]["name"] == "fashion_mlp", config
    with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
        assert f["layers/dense/vars/0"].shape == (784, 128)
        assert f["layers/dense_1/vars/1"].shape == (10,)
        assert f["layers/dense/vars"].attrs["name"] == "hidden"
with h5py.File(d + "/model.h5", "r") as f:
    assert [n.decode() for n in f.attrs["layer_names"]] == ["hidden", "dropout", "classes"]
PY
else
  echo "skip: reading the model needs python3-h5py"
fi
if /usr/bin/python3 -c 'import onnx, torch' 2>/dev/null; then
  /usr/bin/python3 "$src/trainer/model/testdata/onnx_peer.py" check "$out/model/model.onnx" \
    >"$work/onnx.json" || fail "model.onnx does not pass the onnx checker"
fi
echo "tfrecord-export example: accuracy $acc"
