#pragma once
// The OneDevice strategy: the whole model on this process's CPU. Loads the data, builds the
// model and optimizer, resumes from the newest valid checkpoint, trains, checkpoints, and
// evaluates on the test set. A stop request (SIGTERM) ends the run after the current step with
// a checkpoint.
// Errors carry the exit policy: InvalidArgument (bad configuration, permanent), NotFound and
// DataLoss (bad data, permanent), Unavailable (checkpoint I/O, retryable), Cancelled (stopped
// on request, after checkpointing).
// Thread-safety: one call at a time; `stop` may be set from a signal handler.

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "trainer/cli/trainer_flags.h"
#include "trainer/progress/progress.h"

namespace lockstep::trainer {

struct TrainResult {
  int64_t steps = 0;
  int64_t resumed_from = 0;  // the checkpoint's step, 0 for a fresh start
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_second = 0;  // steady, after warm-up
};

absl::StatusOr<TrainResult> RunOneDevice(const TrainerConfig& config, ProgressTracker* progress,
                                         const std::atomic<bool>* stop);

}  // namespace lockstep::trainer
