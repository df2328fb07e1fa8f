#include "trainer/data/tfrecord.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer/data/crc32c.h"

namespace lockstep::trainer {
namespace {

constexpr unsigned kBuffer = 256 * 1024;

gzFile Gz(void* f) { return static_cast<gzFile>(f); }

void PutLe(uint64_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t GetLe(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

std::string GzError(gzFile f) {
  int code = 0;
  const char* msg = gzerror(f, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  return msg != nullptr ? msg : "unknown error";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Create(const std::string& path,
                                                                   Compression c) {
  // "T": zlib's transparent mode, plain bytes through the same buffered writer.
  gzFile f = gzopen(path.c_str(), c == Compression::kGzip ? "wb6" : "wbT");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(f, kBuffer);
  return std::unique_ptr<RecordWriter>(new RecordWriter(path, f));
}

RecordWriter::~RecordWriter() {
  if (file_ != nullptr) gzclose(Gz(file_));
}

absl::Status RecordWriter::Write(std::string_view record) {
  if (file_ == nullptr) return absl::FailedPreconditionError(path_ + ": written after Close");
  char header[12];
  PutLe(record.size(), 8, header);
  PutLe(MaskCrc(Crc32c(std::string_view(header, 8))), 4, header + 8);
  char footer[4];
  PutLe(MaskCrc(Crc32c(record)), 4, footer);
  gzFile f = Gz(file_);
  if (gzwrite(f, header, sizeof(header)) != static_cast<int>(sizeof(header)) ||
      (!record.empty() && gzwrite(f, record.data(), static_cast<unsigned>(record.size())) !=
                              static_cast<int>(record.size())) ||
      gzwrite(f, footer, sizeof(footer)) != static_cast<int>(sizeof(footer))) {
    return absl::DataLossError(absl::StrCat("writing ", path_, ": ", GzError(f)));
  }
  return absl::OkStatus();
}

absl::Status RecordWriter::Flush() {
  if (file_ == nullptr) return absl::OkStatus();
  if (gzflush(Gz(file_), Z_SYNC_FLUSH) != Z_OK) {
    return absl::DataLossError(absl::StrCat("writing ", path_, ": ", GzError(Gz(file_))));
  }
  return absl::OkStatus();
}

absl::Status RecordWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int rc = gzclose(Gz(file_));
  file_ = nullptr;
  if (rc != Z_OK) {
    return absl::DataLossError(absl::StrCat("closing ", path_, ": zlib error ", rc));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path) {
  bool gzip = false;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      if (errno == ENOENT) return absl::NotFoundError(path + ": no such file");
      return absl::PermissionDeniedError(
          absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    }
    unsigned char magic[2] = {0, 0};
    in.read(reinterpret_cast<char*>(magic), 2);
    gzip = in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(f, kBuffer);
  return std::unique_ptr<RecordReader>(new RecordReader(path, f, gzip));
}

RecordReader::~RecordReader() {
  if (file_ != nullptr) gzclose(Gz(file_));
}

absl::StatusOr<size_t> RecordReader::Read(char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const int r =
        gzread(Gz(file_), out + got, static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30)));
    if (r < 0) {
      return absl::DataLossError(
          absl::StrCat(path_, ": record at offset ", offset_, ": ", GzError(Gz(file_))));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  position_ += static_cast<int64_t>(got);
  return got;
}

absl::StatusOr<int64_t> RecordReader::UnreadableBytes() {
  if (!framing_lost_) return 0;
  std::vector<char> buffer(1 << 16);
  for (;;) {
    absl::StatusOr<size_t> got = Read(buffer.data(), buffer.size());
    if (!got.ok()) return got.status();
    if (*got == 0) break;
  }
  return position_ - offset_;
}

absl::Status RecordReader::Corrupt(int64_t at, const std::string& what) const {
  return absl::DataLossError(absl::StrCat(path_, ": corrupt record at offset ", at, ": ", what,
                                          compressed_ ? " (offset in the gzip stream's "
                                                        "uncompressed bytes)"
                                                      : ""));
}

absl::StatusOr<bool> RecordReader::Next(std::string* record) {
  if (ended_) return false;
  char header[12];
  absl::StatusOr<size_t> got = Read(header, sizeof(header));
  if (!got.ok()) {
    ended_ = true;
    return got.status();
  }
  if (*got == 0) {
    ended_ = true;
    return false;
  }
  if (*got < sizeof(header)) {
    ended_ = true;
    framing_lost_ = true;
    return Corrupt(offset_,
                   absl::StrCat("the file ends inside its 12-byte header (", *got, " bytes)"));
  }
  const uint64_t length = GetLe(header, 8);
  if (UnmaskCrc(static_cast<uint32_t>(GetLe(header + 8, 4))) !=
      Crc32c(std::string_view(header, 8))) {
    ended_ = true;
    framing_lost_ = true;
    return Corrupt(offset_, "the length's CRC does not match");
  }
  if (length > kMaxRecord) {
    ended_ = true;
    framing_lost_ = true;
    return Corrupt(offset_, absl::StrCat("a length of ", length, " bytes, over the ", kMaxRecord,
                                         "-byte limit"));
  }
  record->resize(length + 4);
  got = Read(record->data(), length + 4);
  if (!got.ok()) {
    ended_ = true;
    return got.status();
  }
  if (*got < length + 4) {
    ended_ = true;
    framing_lost_ = true;
    return Corrupt(offset_, absl::StrCat("the file ends inside its ", length, "-byte data"));
  }
  const uint32_t stored = static_cast<uint32_t>(GetLe(record->data() + length, 4));
  record->resize(length);
  const int64_t at = offset_;
  offset_ += static_cast<int64_t>(sizeof(header) + length + 4);
  if (UnmaskCrc(stored) != Crc32c(*record)) {
    return Corrupt(at, "the data's CRC does not match");
  }
  return true;
}

}  // namespace lockstep::trainer
