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
// In-place recovery (MultiWorkerMirrored, multi_worker.h): when a collective fails and the
// replica has a `regroup`, it keeps its engine (weights, optimizer and loss-scaler state) and
// position, waits for the group to re-form around the lost rank's replacement, takes over
// the state of the member furthest along (initial_state.h: SyncRecoveredState; the
// replacement itself starts there instead of step 1) and goes on from the same data
// position, so no completed step is lost and none is trained twice. The chief records each
// recovery in its progress (status.recoveries).
// Elastic groups (multi_worker.h) change members at a step boundary: when `regroup_due` says a
// change is due, the replica raises it in the step's trailer; every replica sees the sum, applies
// that step's update and regroups in the same way (the global batch stays; each replica's share
// becomes global / size), the newcomers taking the state over from the members.
// Errors: as RunOneDevice's, plus Aborted ("peer lost: ...") when a collective fails (and no
// regroup is possible).
// Thread-safety: one call per replica thread.

#include <atomic>
#include <functional>
#include <optional>
#include <string>

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
  bool no_test_data = false;  // this task would have evaluated, but the data has no test set
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_second = 0;  // steady, after warm-up (the chief's, for the whole group)
  // The share of the training loop's time this task spent waiting for its next batch (the
  // input pipeline's cost to training); negative when not measured.
  double data_wait_share = -1;
};

// A group re-formed after a lost peer: the collective to go on with, and what the coordination
// service said of it.
struct Regrouped {
  comm::Collective* comm = nullptr;
  int64_t epoch = 0;
  std::string replaced;  // the tasks whose process changed ("worker 1"), "" when none
  std::string cause;     // what began the epoch
  double since = 0;      // monotonic seconds (MonotonicSeconds) when this task began to join
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
  // In-place recovery, unset elsewhere: called after a collective failed with `why` (an OK
  // `why`: a planned membership change at a step boundary); blocks until the group re-formed
  // and returns it, or an error that ends the replica.
  std::function<absl::StatusOr<Regrouped>(const absl::Status& why)> regroup;
  // This replica replaces a lost one in a running group (the group's state, not a checkpoint):
  // the epoch it joined (comm unset). It records that recovery as the survivors do (the
  // seconds counted from its own start: it did not see the failure).
  std::optional<Regrouped> replacement;
  // Elastic groups: a planned membership change is due (regroup at the next step boundary).
  std::function<bool()> regroup_due;
  // Stopped while the group re-formed, this replica stopped the whole group and checkpoints
  // (unset: the chief does).
  std::function<bool()> stopped_the_group;
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
