#pragma once
// The synchronous strategies' start: every replica begins from the chief's (rank 0's) state.
// The chief restores the newest checkpoint of --checkpoint-dir, if any, into its engine's host
// model and optimizer; then it broadcasts a typed header (what it restored and where the run
// resumes) followed by every parameter and optimizer slot, and every replica loads them.
//
// Cross-rank contract: every rank calls SyncInitialState once, before its first step, with the
// same model and optimizer. The header is broadcast even when the chief failed to restore, so
// no rank waits for a state that never comes: the chief returns its own error and the others
// FailedPrecondition. The header rides in the collective's float slots as raw bits (a
// broadcast copies bytes; nothing adds them), so steps past 2^24 survive, and carries a format
// version: all ranks run the same binary, and a mismatch is refused rather than misread.
// Errors: the restore's, Aborted ("peer lost: ...") when a broadcast fails.
// Thread-safety: one call per replica thread.

#include <array>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/collective.h"
#include "trainer/config/trainer_config.h"
#include "trainer/strategy/engine.h"
#include "trainer/strategy/session.h"

namespace lockstep::trainer {

struct InitialStateHeader {
  enum class Source : int32_t {
    kFresh = 0,          // no checkpoint: everybody keeps the seed's weights, then the chief's
    kCheckpoint = 1,     // the chief restored a checkpoint at `at`
    kRestoreFailed = 2,  // the chief could not restore: every rank ends
    kHeld = 3,           // (a regroup) this rank holds the running job's state at `at`
  };
  Source source = Source::kFresh;
  Position at;
};

// The header as it travels: 8 float slots of raw bits.
inline constexpr int64_t kInitialStateHeaderSlots = 8;
using EncodedHeader = std::array<float, kInitialStateHeaderSlots>;
EncodedHeader EncodeHeader(const InitialStateHeader& h);
// InvalidArgument for another format version or an unknown source.
absl::StatusOr<InitialStateHeader> DecodeHeader(const EncodedHeader& wire);

// The position this replica starts at, and whether it came from a checkpoint. `comm` may be
// null (one replica): then only the restore happens.
struct InitialState {
  Position at;
  bool resumed = false;
};
absl::StatusOr<InitialState> SyncInitialState(const TrainerConfig& c, Engine& engine,
                                              comm::Collective* comm, absl::Duration timeout);

// In-place recovery: the group re-formed after a lost peer, and every member takes over the
// state of the one furthest along. Each rank says what it holds (`held`: its position, or
// nullopt for a replacement that holds nothing) in an all-gather of headers; the rank with the
// most steps (the lowest such rank on a tie) then broadcasts its weights, optimizer state and
// loss-scaler state, and every rank loads them, so all continue bit for bit alike from
// `at`. A survivor can be one step ahead of another (its step's collectives completed before
// the peer was lost, the other's did not): taking the furthest loses no completed step.
// Cross-rank contract: every member of the new group calls it once, right after the group
// formed, before any other collective.
// Errors: FailedPrecondition when no rank holds a state; Aborted ("peer lost: ...") when a
// collective fails (the caller may regroup again).
struct RecoveredState {
  Position at;
  int source = 0;          // the rank whose state every rank took
  int64_t held_steps = 0;  // the furthest step any rank held (== at.step)
};
absl::StatusOr<RecoveredState> SyncRecoveredState(Engine& engine, comm::Collective* comm,
                                                  const std::optional<Position>& held,
                                                  absl::Duration timeout);

}  // namespace lockstep::trainer
