#pragma once
// TFRecord files, as tf.io.TFRecordWriter writes them and tf.data.TFRecordDataset reads them
// (and TensorBoard's event files are framed): each record is
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
// little-endian, and the whole file may be one gzip stream (TFRecordOptions' "GZIP").
// Thread-safety: one thread per reader or writer.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lockstep::trainer {

enum class Compression { kNone, kGzip };

class RecordWriter {
 public:
  // Creates (or truncates) `path`.
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Create(const std::string& path,
                                                              Compression c = Compression::kNone);
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  absl::Status Write(std::string_view record);
  // What was written so far reaches the file (a reader of a growing file sees whole records).
  absl::Status Flush();
  // Flushes and closes; the destructor closes too, ignoring errors.
  absl::Status Close();

 private:
  RecordWriter(std::string path, void* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  void* file_;  // gzFile
};

class RecordReader {
 public:
  // Opens `path`: NotFound when it does not exist. A gzip file is recognised by its first bytes
  // and decompressed as it is read.
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(const std::string& path);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // The next record: true, or false at the end of the file. DataLoss names the file and the
  // record's offset (in the uncompressed stream) for a truncated record or a CRC that does not
  // match. After a data CRC that does not match, the reader is past that record, so a caller
  // that skips corrupt records may go on; after a bad length or a truncation the rest of the
  // file cannot be framed, and Next returns false.
  absl::StatusOr<bool> Next(std::string* record);
  // The offset of the next record in the uncompressed stream.
  int64_t offset() const { return offset_; }
  // After Next ended the file on a bad length or a truncation: the bytes from the record that
  // could not be framed to the end of the stream (uncompressed), which no reader can use.
  // Reads the rest of the stream to count them; 0 when the file ended cleanly.
  absl::StatusOr<int64_t> UnreadableBytes();
  bool compressed() const { return compressed_; }
  const std::string& path() const { return path_; }

  // A record may not be longer than this (a length that passed its CRC but would not fit in
  // memory is refused, not allocated).
  static constexpr uint64_t kMaxRecord = uint64_t{1} << 30;

 private:
  RecordReader(std::string path, void* file, bool compressed)
      : path_(std::move(path)), file_(file), compressed_(compressed) {}
  // Reads exactly n bytes: n, or fewer at the end of the stream; an error for a read failure.
  absl::StatusOr<size_t> Read(char* out, size_t n);
  absl::Status Corrupt(int64_t at, const std::string& what) const;

  std::string path_;
  void* file_;  // gzFile
  bool compressed_;
  int64_t offset_ = 0;
  int64_t position_ = 0;  // bytes of the uncompressed stream read so far
  bool ended_ = false;
  bool framing_lost_ = false;  // ended on a bad length or a truncation
};

}  // namespace lockstep::trainer
