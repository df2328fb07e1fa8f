#pragma once
// TensorBoard event files: one per run directory (train/, validation/), named as TensorFlow
// names them (events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2) so TensorBoard finds them,
// TFRecord-framed (data/tfrecord.h), the first event the file version and each later one a
// step's scalar summaries.
// Thread-safety: one thread per writer.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/tfrecord.h"

namespace lockstep::trainer {

class EventWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Create(const std::string& dir);

  // One event at `step` holding each (tag, value) as a scalar; `wall_time` in seconds since
  // the epoch (0: now).
  absl::Status Scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                       double wall_time = 0);
  // Whole events reach the file (TensorBoard reads a growing file).
  absl::Status Flush() { return records_->Flush(); }
  absl::Status Close() { return records_->Close(); }
  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, std::unique_ptr<RecordWriter> w)
      : path_(std::move(path)), records_(std::move(w)) {}
  std::string path_;
  std::unique_ptr<RecordWriter> records_;
};

}  // namespace lockstep::trainer
