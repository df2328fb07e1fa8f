#pragma once
// ParameterServer training (tf.distribute's ParameterServerStrategy, in the TF_CONFIG form),
// over the variable service and shard store of trainer/ps:
//   ps tasks       serve their shards of the variables (RunPsTask) until SIGTERM;
//   chief/workers  train: pull the variables, compute gradients on their own shard of the data,
//                  push them; the optimizer runs on the PS (RunPsTrainer). Asynchronous by
//                  default: a worker that dies does not stop the others, and when restarted it
//                  pulls the current variables and goes on. --ps-mode=sync aggregates
//                  N - --backup-workers gradients per step and drops stale ones.
// The coordinator (the chief, else worker 0) initializes the PS tasks (from the newest
// checkpoint when there is one), writes checkpoints every --checkpoint-every global steps and
// at the end, and evaluates the final variables. The global step counts applied updates; a
// run takes (steps or epochs x steps per epoch) x trainers of them, so every example is used
// as often as with one worker.
// Errors: Aborted ("peer lost") when a PS task stops answering for --peer-timeout.
// Thread-safety: one call per process.

#include <atomic>

#include "trainer/strategy/data_parallel.h"

namespace lockstep::trainer {

absl::StatusOr<TrainResult> RunPsTask(const TrainerConfig& c, const std::atomic<bool>* stop);
absl::StatusOr<TrainResult> RunPsTrainer(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop);

// Global steps of a ParameterServer run with `trainers` training tasks.
int64_t PsTotalSteps(const TrainerConfig& c, int64_t train_size, int trainers);

}  // namespace lockstep::trainer
