#pragma once
// The evaluator task: watches --checkpoint-dir, evaluates every new checkpoint on the test set,
// and reports each result (a log line "evaluation: step S test accuracy A loss L", and its
// /progress and /metrics with the checkpoint's step, accuracy and loss). It ends after the
// checkpoint of the run's last step. Its failures never fail the job (DESIGN section 4).
// Thread-safety: one call per process.

#include <atomic>

#include "trainer/strategy/data_parallel.h"

namespace lockstep::trainer {

absl::StatusOr<TrainResult> RunEvaluator(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop,
                                         absl::Duration poll = absl::Seconds(2));

}  // namespace lockstep::trainer
