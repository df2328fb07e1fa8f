#!/usr/bin/env bash
# The input pipeline, measured alone and against training, in one run:
#  1. Fashion-MNIST's 60,000 training images as TFRecord files of tf.train.Example (8 GZIP
#     shards) and 6,000 of them as PNG and JPEG files in class folders;
#  2. input_pipeline_bench: records and images decoded per second, one thread against the
#     decode threads;
#  3. lockstep-trainer training the cnn (built-in and Keras config) on the TFRecord files with
#     --threads=2: the share of the training loop spent waiting for data.
# Usage: bench/input_pipeline.sh [BUILD_DIR]   (needs python3-crcmod, python3-protobuf, -pil)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build/release}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$src/e2e/fashion_tfrecords.py" /usr/share/datasets/fashion-mnist \
  "$work/records" 60000 2000 8
/usr/bin/python3 - "$work/images" <<'PY'
import gzip, os, sys
from PIL import Image
out = sys.argv[1]
raw = gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").read()[16:]
labels = gzip.open("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz").read()[8:]
for i in range(6000):
    d = os.path.join(out, "class%d" % labels[i])
    os.makedirs(d, exist_ok=True)
    img = Image.frombytes("L", (28, 28), raw[i * 784:(i + 1) * 784])
    img.save(os.path.join(d, "%05d.%s" % (i, "png" if i % 2 else "jpg")))
PY
echo "== decoding alone (best of 3 loads)"
"$build/bench/input_pipeline_bench" "$work/records/train-*.tfrecord.gz" "$work/images"
cat >"$work/spec.json" <<JSON
{"format": "tfrecord", "files": "$work/records/train-*.tfrecord.gz",
 "validation_files": "$work/records/test-*.tfrecord.gz",
 "features": {"image": {"dtype": "int64", "shape": [784]}, "label": {"dtype": "int64"}},
 "input": "image", "label": "label", "input_scale": 0.00392156862745098}
JSON
echo "== training on the records, --threads=2"
for model in cnn "$src/examples/models/cnn.json"; do
  out=$("$build/trainer/lockstep-trainer" --model="$model" --data-spec="$work/spec.json" \
    --steps=400 --batch-size=64 --threads=2 --metrics-port=0 2>&1)
  rate=$(sed -n 's/^steady training samples\/s: //p' <<<"$out")
  wait=$(sed -n 's/^input pipeline: \([0-9.]*\)%.*/\1/p' <<<"$out")
  printf '%-40s %10s samples/s, %6s%% of the loop waiting for data\n' "$(basename "$model")" \
    "$rate" "$wait"
done
