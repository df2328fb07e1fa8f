#!/usr/bin/python3
"""Writes NumPy files with NumPy itself (np.save, np.savez, np.savez_compressed) for the tests:
every numeric dtype the trainer reads, the .npy format versions 1 and 2, and a Keras-style
dataset archive (x_train uint8 [N, 8, 8], y_train, x_test, y_test).

  write_numpy.py DIR     prints {"name": [values...]} of what each array holds, as float
"""
import json
import sys

try:
    import numpy as np
    from numpy.lib import format as npformat
except ImportError as e:  # the C++ test skips, naming the package
    print("python3-numpy is not installed: %s" % e)
    sys.exit(77)


def main(out):
    rng = np.random.default_rng(3)
    base = np.array([[0, 1, 2], [3, 4, 5]])
    written = {}
    for dtype in ("float32", "float64", "float16", "uint8", "int8", "int16", "uint16", "int32",
                  "uint32", "int64", "uint64", "bool"):
        a = (base % 2 == 0) if dtype == "bool" else base.astype(dtype)
        np.save("%s/%s.npy" % (out, dtype), a)
        written[dtype] = a.astype("float64").ravel().tolist()
    # Half floats beyond small integers: fractions, a subnormal, the largest, a negative zero.
    h = np.array([0.5, -2.25, 3e-6, 65504, -0.0, 1 / 3], dtype="float16")
    np.save(out + "/half.npy", h)
    written["half"] = h.astype("float64").tolist()
    # Format version 2 (a 4-byte header length).
    a = rng.standard_normal((4, 3)).astype("float32")
    with open(out + "/v2.npy", "wb") as f:
        npformat.write_array(f, a, version=(2, 0))
    written["v2"] = a.astype("float64").ravel().tolist()
    # Fortran order and big-endian: refused.
    np.save(out + "/fortran.npy", np.asfortranarray(rng.standard_normal((3, 4))))
    np.save(out + "/big.npy", base.astype(">i4"))
    # A dataset as keras.datasets ships one.
    n, m = 60, 20
    x_train = rng.integers(0, 256, (n, 8, 8), dtype=np.uint8)
    y_train = rng.integers(0, 10, n).astype(np.uint8)
    x_test = rng.integers(0, 256, (m, 8, 8), dtype=np.uint8)
    y_test = rng.integers(0, 10, m).astype(np.int64)
    np.savez_compressed(out + "/dataset.npz", x_train=x_train, y_train=y_train, x_test=x_test,
                        y_test=y_test)
    np.savez(out + "/plain.npz", x=x_test, y=y_test.reshape(m, 1))
    written["x_train"] = x_train.astype("float64").ravel().tolist()
    written["y_train"] = y_train.astype("float64").ravel().tolist()
    written["y_test"] = y_test.astype("float64").ravel().tolist()
    print(json.dumps(written))


if __name__ == "__main__":
    main(sys.argv[1])
