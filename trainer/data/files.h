#pragma once
// The files a data spec's glob names, and the part of them one worker reads.
// Thread-safety: plain functions.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::trainer {

// The files `glob` matches, sorted; NotFound "no file matches GLOB" when there are none.
absl::StatusOr<std::vector<std::string>> MatchFiles(const std::string& glob);

// This worker's part of the files, as tf.data's AutoShardPolicy.FILE gives it when the files
// divide evenly over the workers: worker `index` of `count` reads files index, index + count,
// ... of the sorted list. Otherwise (fewer files than workers, or a count they do not divide
// by) every worker reads every file and the batcher splits the records, so that no worker has
// a file more than another, whose records the others could not match step for step.
struct FileShard {
  int index = 0;
  int count = 1;
};

struct FileSet {
  std::vector<std::string> files;  // the files to read
  int64_t matched = 0;             // the files the glob matched
  bool sharded = false;            // by file: `files` is this worker's part
};
absl::StatusOr<FileSet> ShardedFiles(const std::string& glob, FileShard shard);

}  // namespace lockstep::trainer
