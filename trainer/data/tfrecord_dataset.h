#pragma once
// A dataset of tf.train.Example records in TFRecord files (data_spec.h says which features are
// the input and the label), read into memory: the files a glob matches, in name order, each
// record in file order.
// Thread-safety: plain functions.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/data_spec.h"
#include "trainer/data/dataset.h"
#include "trainer/data/files.h"

namespace lockstep::trainer {

// A file in which skip_corrupt skipped something: the records whose data CRC failed, and the
// bytes past a record that could not be framed (a bad length or a truncation: the rest of the
// file, whose records cannot be told apart), with what was wrong there.
struct CorruptFile {
  std::string file;
  int64_t records_skipped = 0;
  int64_t unreadable_bytes = 0;
  std::string first_problem;  // the reader's message for the first corruption
};

struct TfRecordReport {
  std::vector<std::string> files;    // the files read
  int64_t matched = 0;               // the files the glob matched
  bool sharded = false;              // by file: `files` is this worker's part
  int64_t records = 0;               // read into the dataset
  int64_t skipped = 0;               // corrupt, skipped (skip_corrupt)
  int64_t unreadable_bytes = 0;      // past corrupt framing, summed over the files
  std::vector<CorruptFile> corrupt;  // per file, in file order
};

// Every record of the files `glob` matches. DataLoss names the file, the record and its
// offset: a corrupt record (unless spec.skip_corrupt), a record that is not a tf.train.Example,
// a feature that is missing (without a default), of the other type, or of the wrong length.
// The dataset's inputs are the spec's input features, its targets its label features, in the
// spec's order (the trainer checks them against the model: class ids, shapes).
// Records are read in order and decoded (parsed, converted) on `threads` threads (0: the
// machine's, data/parallel_for.h).
absl::StatusOr<Dataset> LoadTfRecords(const std::string& glob, const DataSpec& spec,
                                      TfRecordReport* report = nullptr, int threads = 0,
                                      FileShard shard = {});

}  // namespace lockstep::trainer
