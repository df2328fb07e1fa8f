"""An independent reader and writer of Keras's weights files, through h5py.

  h5_peer.py dump FILE             prints FILE's datasets and attributes as JSON (FILE may be a
                                   .keras archive: its members, config and weights)
  h5_peer.py write-keras2 SPEC OUT writes SPEC as tf.keras 2's save_weights does
  h5_peer.py write-model-h5 SPEC OUT the same under "model_weights", as model.save("x.h5") does
  h5_peer.py write-keras3 SPEC OUT writes SPEC as Keras 3's H5IOStore does

SPEC (JSON): {"layer_names": [...], "layers": {name: [[weight_name, shape, values], ...]},
              "objects": [[path, name], ...], "vars": {path: [shape, values]}}
Exit 77 when h5py is missing (the caller skips).
"""
import io
import json
import sys
import zipfile

try:
    import h5py
    import numpy as np
except ImportError as e:
    print("h5py or numpy missing: %s" % e, file=sys.stderr)
    sys.exit(77)


def attr_value(v):
    if isinstance(v, bytes):
        return v.decode("utf8")
    if isinstance(v, np.ndarray):
        return [attr_value(x) for x in v.tolist()]
    if isinstance(v, (np.bytes_,)):
        return bytes(v).decode("utf8")
    if isinstance(v, (np.generic,)):
        return v.item()
    return v


def dump_h5(f):
    out = {"datasets": {}, "attrs": {}, "groups": []}

    def attrs_of(path, obj):
        if len(obj.attrs):
            out["attrs"][path] = {k: attr_value(obj.attrs[k]) for k in obj.attrs}

    attrs_of("", f)

    def visit(name, obj):
        attrs_of(name, obj)
        if isinstance(obj, h5py.Dataset):
            a = np.asarray(obj[()])
            out["datasets"][name] = {"shape": list(a.shape), "dtype": str(a.dtype),
                                     "values": a.astype("float64").reshape(-1).tolist()}
        else:
            out["groups"].append(name)

    f.visititems(visit)
    return out


def dump(path):
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            out = {"members": sorted(z.namelist()),
                   "config": json.loads(z.read("config.json")),
                   "metadata": json.loads(z.read("metadata.json"))}
            with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
                out["weights"] = dump_h5(f)
        return out
    with h5py.File(path, "r") as f:
        return dump_h5(f)


def write_keras2(spec, g):
    g.attrs["layer_names"] = np.asarray([n.encode("utf8") for n in spec["layer_names"]])
    g.attrs["backend"] = b"tensorflow"
    g.attrs["keras_version"] = b"2.15.0"
    for name in sorted(spec["layer_names"]):
        lg = g.create_group(name)
        ws = spec["layers"].get(name, [])
        lg.attrs["weight_names"] = np.asarray([w[0].encode("utf8") for w in ws])
        for wname, shape, values in ws:
            d = lg.create_dataset(wname, tuple(shape), dtype="float32")
            d[...] = np.asarray(values, dtype="float32").reshape(shape)


def write_keras3(spec, f):
    for path, name in spec["objects"]:
        g = f.create_group(path + "/vars" if path else "vars")
        g.attrs["name"] = name
    for path, (shape, values) in spec["vars"].items():
        f[path] = np.asarray(values, dtype="float32").reshape(shape)


def main():
    cmd = sys.argv[1]
    if cmd == "dump":
        json.dump(dump(sys.argv[2]), sys.stdout)
        return
    spec = json.load(open(sys.argv[2]))
    with h5py.File(sys.argv[3], "w") as f:
        if cmd == "write-keras2":
            write_keras2(spec, f)
        elif cmd == "write-model-h5":
            f.attrs["model_config"] = json.dumps({"class_name": "Sequential"}).encode("utf8")
            write_keras2(spec, f.create_group("model_weights"))
        elif cmd == "write-keras3":
            write_keras3(spec, f)
        else:
            sys.exit("unknown command " + cmd)
    print("{}")


if __name__ == "__main__":
    main()
