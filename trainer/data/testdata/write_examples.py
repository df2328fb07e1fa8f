#!/usr/bin/python3
"""Writes a learnable classification dataset as TFRecord files of tf.train.Example, as a
TensorFlow user's script would, without TensorFlow: the Example message is declared here from
TensorFlow's field numbers (feature.proto, example.proto) with Debian's python3-protobuf, and
the records framed with crcmod's CRC-32C. Each class is a fixed random prototype; an example is
its class's prototype plus noise.

  write_examples.py DIR FILES EXAMPLES_PER_FILE FEATURES CLASSES [gzip]

writes DIR/part-00000-of-000NN.tfrecord[.gz]... with features "x" (float_list, FEATURES values)
and "y" (int64_list, one class id), and prints {"files": [...], "examples": N}.
"""
import gzip
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing"))
import tf_formats  # noqa: E402


def main():
    out, files, per_file, width, classes = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                            int(sys.argv[4]), int(sys.argv[5]))
    gz = len(sys.argv) > 6 and sys.argv[6] == "gzip"
    rng = random.Random(5)
    prototypes = [[rng.uniform(-1, 1) for _ in range(width)] for _ in range(classes)]
    Example = tf_formats.example_class()
    names = []
    for k in range(files):
        raw = []
        for _ in range(per_file):
            y = rng.randrange(classes)
            e = Example()
            e.features.feature["x"].float_list.value.extend(
                [p + rng.gauss(0, 0.5) for p in prototypes[y]])
            e.features.feature["y"].int64_list.value.append(y)
            raw.append(tf_formats.frame(e.SerializeToString()))
        name = "%s/part-%05d-of-%05d.tfrecord%s" % (out, k, files, ".gz" if gz else "")
        data = b"".join(raw)
        with open(name, "wb") as f:
            f.write(gzip.compress(data) if gz else data)
        names.append(name)
    print(json.dumps({"files": names, "examples": files * per_file}))


if __name__ == "__main__":
    main()
