#pragma once
// The synchronous data-parallel training loop, one call per replica, computing on a CPU or GPU
// engine (engine.h). OneDevice is one replica alone; Mirrored and CentralStorage run several as
// threads (on CPU threads over the in-process backend, or one per GPU over NCCL);
// MultiWorkerMirrored runs one per process over the ring or NCCL. RunReplica reads as its
// steps; every replica:
//   1. builds the model from the seed and starts from the chief's state (initial_state.h:
//      the chief resumes from the newest checkpoint and broadcasts a typed header, weights
//      and optimizer state);
//   2. takes its shard of every global batch (--batch-size is global; it must divide by the
//      replica count);
//   3. runs the steps: reduces gradients in buckets while backward runs (BucketReducer),
//      averaging them, then updates the variables (updater.h): on every replica (identical
//      weights follow), or for CentralStorage once, on the chief's variables, which are then
//      broadcast;
//      each step all-reduces a trailer {stop requested, loss, correct, samples}: a stop
//      request on any replica ends every replica at the same step, after the chief
//      checkpoints (a coordinated checkpoint), and the progress the chief reports covers the
//      global batch;
//   4. evaluates on the test set (when asked).
// Errors: as RunOneDevice's, plus Aborted ("peer lost: ...") when a collective fails.
// Thread-safety: one call per replica thread.

#include <atomic>
#include <functional>

#include "absl/status/statusor.h"
#include "trainer/comm/collective.h"
#include "trainer/progress/progress.h"
#include "trainer/strategy/engine.h"
#include "trainer/strategy/session.h"

namespace lockstep::trainer {

struct TrainResult {
  int64_t steps = 0;
  int64_t resumed_from = 0;  // the checkpoint's step, 0 for a fresh start
  // Whether this task evaluated the test set: only one task of a group does (the chief, else
  // worker 0; and an evaluator); elsewhere test_accuracy and test_loss mean nothing.
  bool evaluated = false;
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_second = 0;  // steady, after warm-up (the chief's, for the whole group)
  // The share of the training loop's time this task spent waiting for its next batch (the
  // input pipeline's cost to training); negative when not measured.
  double data_wait_share = -1;
};

struct Replica {
  comm::Collective* comm = nullptr;  // null: a single replica (OneDevice)
  Placement placement;               // CPU, or GPUs (PlaceReplicas)
  int device = 0;                    // this replica's GPU
  bool central_variables = false;    // CentralStorage
  absl::Duration collective_timeout = absl::Minutes(5);
  std::function<bool()> stop_requested;  // this replica was asked to stop
  ProgressTracker* progress = nullptr;   // the chief's; null elsewhere
  bool evaluate = true;                  // evaluate on the test set at the end
};

absl::StatusOr<TrainResult> RunReplica(const TrainerConfig& c, const Datasets& data,
                                       const Replica& r);

// OneDevice: loads the data and runs one replica.
absl::StatusOr<TrainResult> RunOneDevice(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop);

// Mirrored and CentralStorage: --replicas threads in this process.
absl::StatusOr<TrainResult> RunMirrored(const TrainerConfig& c, ProgressTracker* progress,
                                        const std::atomic<bool>* stop);

}  // namespace lockstep::trainer
