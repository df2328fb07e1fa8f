#!/usr/bin/python3
"""Fashion-MNIST (Debian's dataset-fashion-mnist IDX files) as TFRecord files of
tf.train.Example, as the TensorFlow script of docs/tasks/your-data.md writes them, without TensorFlow: the
Example message from trainer/testing/tf_formats.py, GZIP framing from Python's gzip.

  fashion_tfrecords.py IDX_DIR OUT_DIR TRAIN_EXAMPLES TEST_EXAMPLES SHARDS

writes OUT_DIR/train-0000K-of-0000N.tfrecord.gz (every N-th example of the first
TRAIN_EXAMPLES) and OUT_DIR/test-00000-of-00001.tfrecord.gz, features "image" (int64_list of
784 pixels) and "label" (int64_list, one class id).
"""
import gzip
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer",
                                "testing"))
import tf_formats  # noqa: E402


def idx(path):
    raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return raw[4 + 4 * ndim:], dims


def write(path, images, labels, indices, Example):
    with gzip.open(path, "wb") as f:
        for i in indices:
            e = Example()
            e.features.feature["image"].int64_list.value.extend(images[i * 784:(i + 1) * 784])
            e.features.feature["label"].int64_list.value.append(labels[i])
            f.write(tf_formats.frame(e.SerializeToString()))


def main():
    src, out, n_train, n_test, shards = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                         int(sys.argv[4]), int(sys.argv[5]))
    os.makedirs(out, exist_ok=True)
    Example = tf_formats.example_class()
    for split, n in (("train", n_train), ("t10k", n_test)):
        images, _ = idx(os.path.join(src, split + "-images-idx3-ubyte.gz"))
        labels, _ = idx(os.path.join(src, split + "-labels-idx1-ubyte.gz"))
        if split == "train":
            for k in range(shards):
                write("%s/train-%05d-of-%05d.tfrecord.gz" % (out, k, shards), images, labels,
                      range(k, n, shards), Example)
        else:
            write("%s/test-00000-of-00001.tfrecord.gz" % out, images, labels, range(n), Example)


if __name__ == "__main__":
    main()
