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
