#pragma once
// Updater: how a synchronous replica applies a step's averaged gradients to the variables.
//   Replicated (OneDevice, Mirrored, MultiWorkerMirrored): every replica runs the optimizer
//     on its own copy (on its device); identical gradients keep the copies identical.
//   Central (CentralStorage): one optimizer, on the chief's host variables; the chief then
//     broadcasts the variables and every replica copies them to its device.
// Cross-rank contract (central): every rank calls Apply once per step, in step order.
// Errors: the engine's; Aborted ("peer lost: ...") when the broadcast fails.
// Thread-safety: one updater per replica thread.

#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/comm/collective.h"
#include "trainer/strategy/engine.h"

namespace lockstep::trainer {

class Updater {
 public:
  virtual ~Updater() = default;
  // Called after Engine::FinishGradients: the gradients are this step's average.
  virtual absl::Status Apply(float learning_rate) = 0;
};

std::unique_ptr<Updater> MakeReplicatedUpdater(Engine* engine);
// `comm` is the replica group; its rank 0 holds the variables.
std::unique_ptr<Updater> MakeCentralUpdater(Engine* engine, comm::Collective* comm,
                                            absl::Duration timeout);

}  // namespace lockstep::trainer
