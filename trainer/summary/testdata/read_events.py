#!/usr/bin/python3
"""An independent reader of TensorBoard event files for the tests: the TFRecord framing checked
with crcmod's CRC-32C, and each record decoded with Debian's python3-protobuf as TensorFlow's
tensorflow.Event message, declared here from TensorFlow's field numbers (event.proto,
summary.proto) rather than from the trainer's .proto. Prints a JSON list of events:
{"wall_time", "step", "file_version"?, "scalars": {tag: value}}.

  read_events.py FILE
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing"))
import tf_formats  # noqa: E402

F = tf_formats.FIELD


def event_class():
    fdp = tf_formats.descriptor_pb2.FileDescriptorProto(name="tb_event.proto",
                                                        package="tensorflow", syntax="proto3")
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
    return tf_formats.message_class(fdp, "tensorflow.Event")


def main(path):
    Event = event_class()
    out = []
    for data in tf_formats.read_records(path):
        e = Event()
        e.ParseFromString(data)
        item = {"wall_time": e.wall_time, "step": e.step,
                "scalars": {v.tag: v.simple_value for v in e.summary.value}}
        if e.file_version:
            item["file_version"] = e.file_version
        out.append(item)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
