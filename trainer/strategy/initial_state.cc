#include "trainer/strategy/initial_state.h"

#include <cstring>

#include "trainer/comm/peer_lost.h"

namespace lockstep::trainer {
namespace {

// Bumped whenever the header's layout changes (4 floats used as flags before version 1).
constexpr int32_t kHeaderVersion = 1;

struct WireHeader {
  int32_t version;
  int32_t source;
  int64_t step;
  int64_t epoch;
  int64_t epoch_step;
};
static_assert(sizeof(WireHeader) == sizeof(EncodedHeader));

// The loss scaler's state as it travels after the tensors.
struct WireScaler {
  float scale;
  int32_t unused;
  int64_t streak;
  int64_t skipped;
};
constexpr size_t kScalerSlots = sizeof(WireScaler) / sizeof(float);
static_assert(sizeof(WireScaler) == kScalerSlots * sizeof(float));

}  // namespace

EncodedHeader EncodeHeader(const InitialStateHeader& h) {
  const WireHeader w{.version = kHeaderVersion,
                     .source = static_cast<int32_t>(h.source),
                     .step = h.at.step,
                     .epoch = h.at.epoch,
                     .epoch_step = h.at.epoch_step};
  EncodedHeader out;
  std::memcpy(out.data(), &w, sizeof(w));
  return out;
}

absl::StatusOr<InitialStateHeader> DecodeHeader(const EncodedHeader& wire) {
  WireHeader w;
  std::memcpy(&w, wire.data(), sizeof(w));
  if (w.version != kHeaderVersion) {
    return absl::InvalidArgumentError("the chief's initial-state header has format version " +
                                      std::to_string(w.version) + ", this trainer reads " +
                                      std::to_string(kHeaderVersion) +
                                      "; every task must run the same lockstep-trainer");
  }
  using Source = InitialStateHeader::Source;
  const auto source = static_cast<Source>(w.source);
  if (source != Source::kFresh && source != Source::kCheckpoint &&
      source != Source::kRestoreFailed && source != Source::kHeld) {
    return absl::InvalidArgumentError("the chief's initial-state header has unknown source " +
                                      std::to_string(w.source));
  }
  return InitialStateHeader{.source = source,
                            .at = {.step = w.step, .epoch = w.epoch, .epoch_step = w.epoch_step}};
}

absl::StatusOr<InitialState> SyncInitialState(const TrainerConfig& c, Engine& engine,
                                              comm::Collective* comm, absl::Duration timeout) {
  using Source = InitialStateHeader::Source;
  const bool chief = comm == nullptr || comm->rank() == 0;
  InitialStateHeader header;
  absl::Status restore;
  if (chief) {
    absl::StatusOr<std::optional<CheckpointState>> latest = NewestCheckpoint(c);
    if (!latest.ok()) {
      restore = latest.status();
    } else if (latest->has_value()) {
      const CheckpointState& ck = **latest;
      restore = RestoreCheckpoint(ck, c, &engine.model(), &engine.optimizer());
      header = {.source = Source::kCheckpoint,
                .at = {.step = ck.step, .epoch = ck.epoch, .epoch_step = ck.epoch_step}};
    }
    if (!restore.ok()) header.source = Source::kRestoreFailed;
  }
  if (comm == nullptr) {
    if (!restore.ok()) return restore;
    if (header.source == Source::kCheckpoint) {
      if (absl::Status s = engine.Load(); !s.ok()) return s;
    }
    return InitialState{.at = header.at, .resumed = header.source == Source::kCheckpoint};
  }

  EncodedHeader wire = EncodeHeader(header);
  if (absl::Status s = comm::AsPeerLost(
          comm->Broadcast(wire.data(), kInitialStateHeaderSlots, 0)->Wait(timeout));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<InitialStateHeader> got = DecodeHeader(wire);
  if (!got.ok()) return got.status();
  if (got->source == Source::kRestoreFailed) {
    return chief ? restore
                 : absl::FailedPreconditionError("the chief could not restore its checkpoint");
  }
  std::vector<Tensor*> all = engine.model().Params();
  for (Tensor* t : engine.optimizer().State()) all.push_back(t);
  std::vector<float> flat = PackTensors(all);
  if (absl::Status s = comm::AsPeerLost(
          comm->Broadcast(flat.data(), static_cast<int64_t>(flat.size()), 0)->Wait(timeout));
      !s.ok()) {
    return s;
  }
  UnpackTensors(flat, all);
  if (absl::Status s = engine.Load(); !s.ok()) return s;
  return InitialState{.at = got->at, .resumed = got->source == Source::kCheckpoint};
}

absl::StatusOr<RecoveredState> SyncRecoveredState(Engine& engine, comm::Collective* comm,
                                                  const std::optional<Position>& held,
                                                  absl::Duration timeout) {
  using Source = InitialStateHeader::Source;
  const int n = comm->size();
  const InitialStateHeader mine{.source = held ? Source::kHeld : Source::kFresh,
                                .at = held.value_or(Position{})};
  const EncodedHeader wire = EncodeHeader(mine);
  std::vector<float> all(static_cast<size_t>(kInitialStateHeaderSlots * n));
  if (absl::Status s = comm::AsPeerLost(
          comm->AllGather(wire.data(), kInitialStateHeaderSlots, all.data())->Wait(timeout));
      !s.ok()) {
    return s;
  }
  RecoveredState out{.source = -1};
  for (int r = 0; r < n; ++r) {
    EncodedHeader h;
    std::copy_n(all.begin() + r * kInitialStateHeaderSlots, kInitialStateHeaderSlots, h.begin());
    absl::StatusOr<InitialStateHeader> got = DecodeHeader(h);
    if (!got.ok()) return got.status();
    if (got->source != Source::kHeld) continue;
    if (out.source < 0 || got->at.step > out.at.step) {
      out.source = r;
      out.at = got->at;
    }
  }
  if (out.source < 0) {
    return absl::FailedPreconditionError(
        "no member of the re-formed group holds the training state (every rank was replaced)");
  }
  out.held_steps = out.at.step;

  // The state travels as one buffer: parameters, optimizer slots, then the loss scaler's
  // state as raw bits (a broadcast copies bytes).
  if (comm->rank() == out.source) {
    if (absl::Status s = engine.Store(); !s.ok()) return s;
  }
  std::vector<Tensor*> tensors = engine.model().Params();
  for (Tensor* t : engine.optimizer().State()) tensors.push_back(t);
  std::vector<float> flat = PackTensors(tensors);
  const size_t state_at = flat.size();
  flat.resize(state_at + kScalerSlots);
  const LossScaler::State held_scaler = engine.loss_scale_state();
  const WireScaler scaler{.scale = held_scaler.scale,
                          .unused = 0,
                          .streak = held_scaler.streak,
                          .skipped = held_scaler.skipped};
  std::memcpy(flat.data() + state_at, &scaler, sizeof(scaler));
  if (absl::Status s = comm::AsPeerLost(
          comm->Broadcast(flat.data(), static_cast<int64_t>(flat.size()), out.source)
              ->Wait(timeout));
      !s.ok()) {
    return s;
  }
  WireScaler taken;
  std::memcpy(&taken, flat.data() + state_at, sizeof(taken));
  flat.resize(state_at);
  UnpackTensors(flat, tensors);
  engine.set_loss_scale_state(
      {.scale = taken.scale, .streak = taken.streak, .skipped = taken.skipped});
  if (absl::Status s = engine.Load(); !s.ok()) return s;
  return out;
}

}  // namespace lockstep::trainer
