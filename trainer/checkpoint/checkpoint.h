#pragma once
// Checkpoints: the model's parameters, the optimizer's state, the global step and the data
// position, in one file per checkpoint, `ckpt-<step>.lsc` in the checkpoint directory.
//
// Format: "LSCKPT01", a little-endian u32 header length, a JSON header (step, epoch,
// epoch_step, model, optimizer, and the shape of every tensor), the tensors' fp32 values in
// header order, and a CRC-32 of everything before it. Writes are atomic: a temporary file is
// written and fsync'ed, renamed into place, and the directory fsync'ed; then all but the newest
// `keep` checkpoints are removed. Loading takes the newest checkpoint that is whole and whose
// checksum matches, and reports every newer one it had to skip.
// Thread-safety: functions over files; one writer per directory.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

struct CheckpointState {
  int64_t step = 0;   // optimizer steps taken
  int64_t epoch = 0;  // data position: the next batch is (epoch, epoch_step)
  int64_t epoch_step = 0;
  std::string model;
  std::string optimizer;
  std::vector<Tensor> params;  // the model's parameters, then its kept state (Model::State)
  std::vector<Tensor> optimizer_state;
};

// Returns the path written.
absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointState& state,
                                            int keep);

// Reads one checkpoint file; DataLoss says what is wrong with it.
absl::StatusOr<CheckpointState> ReadCheckpoint(const std::string& path);

// The newest valid checkpoint in `dir` past step `after_step` (nullopt when there is none);
// every skipped file is appended to `skipped` with the reason. Files named for a step at or
// before `after_step` are not read (an evaluator polling for new checkpoints reads each once).
absl::StatusOr<std::optional<CheckpointState>> LoadLatestCheckpoint(
    const std::string& dir, std::vector<std::string>* skipped, int64_t after_step = -1);

}  // namespace lockstep::trainer
