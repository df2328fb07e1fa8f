"""What the test peers share: TFRecord framing (masked CRC-32C from crcmod) and message classes
built with Debian's python3-protobuf from descriptors written here from TensorFlow's field
numbers, so no peer depends on the trainer's own .proto files. Exits 77 (the C++ test then
skips, naming the package) when a module is missing."""
import gzip
import struct
import sys

try:
    import crcmod.predefined
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:
    print("python3-crcmod or python3-protobuf is not installed: %s" % e)
    sys.exit(77)

FIELD = descriptor_pb2.FieldDescriptorProto
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def mask(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    """One TFRecord record."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", mask(crc32c(length))) + data +
            struct.pack("<I", mask(crc32c(data))))


def read_records(path):
    """Every record of a TFRecord file (gzip or not), each CRC checked."""
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
        out.append(data)
        i += 16 + n
    return out


def message_class(fdp, full_name):
    """The class of message `full_name` of the FileDescriptorProto `fdp`."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def example_class():
    """tf.train.Example, declared from TensorFlow's feature.proto and example.proto."""
    F = FIELD
    fdp = descriptor_pb2.FileDescriptorProto(name="tf_example.proto", package="tensorflow",
                                             syntax="proto3")
    for name, kind in (("BytesList", F.TYPE_BYTES), ("FloatList", F.TYPE_FLOAT),
                       ("Int64List", F.TYPE_INT64)):
        m = fdp.message_type.add(name=name)
        f = m.field.add(name="value", number=1, type=kind, label=F.LABEL_REPEATED)
        if kind != F.TYPE_BYTES:
            f.options.packed = True
    feature = fdp.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for name, number, msg in (("bytes_list", 1, "BytesList"), ("float_list", 2, "FloatList"),
                              ("int64_list", 3, "Int64List")):
        feature.field.add(name=name, number=number, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                          type_name=".tensorflow." + msg, oneof_index=0)
    features = fdp.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tensorflow.Feature")
    features.field.add(name="feature", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                       type_name=".tensorflow.Features.FeatureEntry")
    example = fdp.message_type.add(name="Example")
    example.field.add(name="features", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                      type_name=".tensorflow.Features")
    return message_class(fdp, "tensorflow.Example")
