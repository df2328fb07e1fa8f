#pragma once
// MultiWorkerMirrored: one replica per process, the processes being the chief and workers of
// TF_CONFIG (rank 0 is the chief, else worker 0). Setup, in order:
//   1. rank 0 serves the coordination service on its TF_CONFIG address;
//   2. every rank joins it (presenting the job token), binds a ring listener on a free port
//      and publishes "<its TF_CONFIG host>:<port>" under ring/<rank>;
//   3. every rank reads the others' addresses and joins the ring (token handshake);
//   4. heartbeats start: a peer silent for --peer-timeout, or a coordinator gone, aborts the
//      ring, so no rank hangs in a collective;
//   5. the synchronous loop runs (data_parallel.h) over the chosen backend, which is logged
//      with the candidates it skipped (collective_choice.h): --collective auto takes NCCL when
//      the replicas are on GPUs (its unique id shared through the coordination service
//      instead of steps 2-3) and the TCP ring otherwise.
// A stop request (SIGTERM) on any rank reaches the others through the step trailer and the
// heartbeats, and the chief checkpoints before everyone exits.
// A lost peer: with --recovery=InPlace (LOCKSTEP_RECOVERY, which the operator sets) the
// survivors keep their state, rejoin the coordination service for the next membership epoch
// (coordination.h) and connect its collective, waiting up to --rejoin-timeout for the lost
// rank's replacement; the replacement (a process that joins an epoch past 0) takes over the
// group's state, and training goes on from the same step (data_parallel.h). A lost chief takes
// the coordination service with it: the workers exit retryable and the group restarts from
// its last checkpoint. Otherwise (RestartGroup) every rank exits retryable.
// Thread-safety: one call per process.

#include <atomic>

#include "trainer/strategy/data_parallel.h"

namespace lockstep::trainer {

// The rank of this task and the "host:port" of every rank, from TF_CONFIG (chief first, then
// workers); InvalidArgument for a task that is not a chief or worker.
struct World {
  int rank = 0;
  std::vector<std::string> addresses;
};
absl::StatusOr<World> TrainingWorld(const TfConfig& tf);

absl::StatusOr<TrainResult> RunMultiWorkerMirrored(const TrainerConfig& c,
                                                   ProgressTracker* progress,
                                                   const std::atomic<bool>* stop);

}  // namespace lockstep::trainer
