#!/usr/bin/python3
"""An independent TFRecord peer for the tests, written from the format's description with
Python's own gzip module and crcmod's CRC-32C:

  tfrecord_peer.py read FILE               prints the records (hex) as a JSON list, after
                                           checking every length and data CRC
  tfrecord_peer.py write FILE none|gzip HEX...   writes the records given in hex, and prints
                                           {"written": count}
"""
import gzip
import json
import struct
import sys

try:
    import crcmod.predefined
except ImportError as e:  # the C++ test skips, naming the package
    print("python3-crcmod is not installed: %s" % e)
    sys.exit(77)

crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def mask(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    out, i = [], 0
    while i < len(raw):
        (n,) = struct.unpack_from("<Q", raw, i)
        (length_crc,) = struct.unpack_from("<I", raw, i + 8)
        if length_crc != mask(crc32c(raw[i:i + 8])):
            raise SystemExit("length CRC mismatch at offset %d" % i)
        data = raw[i + 12:i + 12 + n]
        (data_crc,) = struct.unpack_from("<I", raw, i + 12 + n)
        if data_crc != mask(crc32c(data)):
            raise SystemExit("data CRC mismatch at offset %d" % i)
        out.append(data.hex())
        i += 16 + n
    return out


def write(path, compression, records):
    frames = []
    for r in records:
        length = struct.pack("<Q", len(r))
        frames.append(length + struct.pack("<I", mask(crc32c(length))) + r +
                      struct.pack("<I", mask(crc32c(r))))
    raw = b"".join(frames)
    with open(path, "wb") as f:
        f.write(gzip.compress(raw) if compression == "gzip" else raw)


if __name__ == "__main__":
    if sys.argv[1] == "read":
        print(json.dumps(read(sys.argv[2])))
    else:
        write(sys.argv[2], sys.argv[3], [bytes.fromhex(h) for h in sys.argv[4:]])
        print(json.dumps({"written": len(sys.argv) - 4}))
