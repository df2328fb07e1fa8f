#!/usr/bin/python3
"""An independent reader of TensorBoard event files for the tests: the TFRecord framing checked
with crcmod's CRC-32C, and each record decoded with Debian's python3-protobuf as TensorFlow's
tensorflow.Event message, declared here from TensorFlow's field numbers (event.proto,
summary.proto) rather than from the trainer's .proto. Prints a JSON list of events:
{"wall_time", "step", "file_version"?, "scalars": {tag: value}}.

  read_events.py FILE
"""
import json
import struct
import sys

try:
    import crcmod.predefined
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:  # the C++ test skips, naming the package
    print("python3-crcmod or python3-protobuf is not installed: %s" % e)
    sys.exit(77)

F = descriptor_pb2.FieldDescriptorProto
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def mask(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    fdp = descriptor_pb2.FileDescriptorProto(name="tb_event.proto", package="tensorflow",
                                             syntax="proto3")
    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    for name, number, kind in (("tag", 1, F.TYPE_STRING), ("simple_value", 2, F.TYPE_FLOAT),
                               ("node_name", 7, F.TYPE_STRING)):
        value.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tensorflow.Summary.Value")
    event = fdp.message_type.add(name="Event")
    for name, number, kind in (("wall_time", 1, F.TYPE_DOUBLE), ("step", 2, F.TYPE_INT64),
                               ("file_version", 3, F.TYPE_STRING), ("graph_def", 4, F.TYPE_BYTES)):
        event.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tensorflow.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def main(path):
    Event = event_class()
    with open(path, "rb") as f:
        raw = f.read()
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
        e = Event()
        e.ParseFromString(data)
        item = {"wall_time": e.wall_time, "step": e.step,
                "scalars": {v.tag: v.simple_value for v in e.summary.value}}
        if e.file_version:
            item["file_version"] = e.file_version
        out.append(item)
        i += 16 + n
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
