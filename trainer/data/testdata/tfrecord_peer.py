#!/usr/bin/python3
"""An independent TFRecord peer for the tests, written from the format's description with
Python's own gzip module and crcmod's CRC-32C (trainer/testing/tf_formats.py):

  tfrecord_peer.py read FILE               prints the records (hex) as a JSON list, after
                                           checking every length and data CRC
  tfrecord_peer.py write FILE none|gzip HEX...   writes the records given in hex, and prints
                                           {"written": count}
"""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing"))
import tf_formats  # noqa: E402


def write(path, compression, records):
    raw = b"".join(tf_formats.frame(r) for r in records)
    with open(path, "wb") as f:
        f.write(gzip.compress(raw) if compression == "gzip" else raw)


if __name__ == "__main__":
    if sys.argv[1] == "read":
        print(json.dumps([r.hex() for r in tf_formats.read_records(sys.argv[2])]))
    else:
        write(sys.argv[2], sys.argv[3], [bytes.fromhex(h) for h in sys.argv[4:]])
        print(json.dumps({"written": len(sys.argv) - 4}))
