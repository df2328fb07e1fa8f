#include "trainer/strategy/training_group.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "trainer/comm/peer_lost.h"

namespace lockstep::trainer {
namespace {

// Paces the joins retried against a host that refuses or stands by (pacing only: deadlines
// are the injected clock's).
constexpr absl::Duration kRetryPause = absl::Milliseconds(100);

}  // namespace

std::string_view GroupStateName(GroupState s) {
  switch (s) {
    case GroupState::kForming:
      return "Forming";
    case GroupState::kTraining:
      return "Training";
    case GroupState::kChangeDue:
      return "ChangeDue";
    case GroupState::kLeaving:
      return "Leaving";
    case GroupState::kRegrouping:
      return "Regrouping";
    case GroupState::kLeft:
      return "Left";
    case GroupState::kStopped:
      return "Stopped";
    case GroupState::kLost:
      return "Lost";
  }
  return "?";
}

std::string_view GroupEventName(GroupEvent e) {
  switch (e) {
    case GroupEvent::kFormed:
      return "Formed";
    case GroupEvent::kPlannedChange:
      return "PlannedChange";
    case GroupEvent::kMemberLost:
      return "MemberLost";
    case GroupEvent::kGroupLost:
      return "GroupLost";
    case GroupEvent::kStopAsked:
      return "StopAsked";
    case GroupEvent::kRegroup:
      return "Regroup";
    case GroupEvent::kLeft:
      return "Left";
    case GroupEvent::kStopSeen:
      return "StopSeen";
    case GroupEvent::kRejoinTimedOut:
      return "RejoinTimedOut";
    case GroupEvent::kTakenOver:
      return "TakenOver";
  }
  return "?";
}

std::optional<GroupState> NextGroupState(GroupState from, GroupEvent on) {
  for (const GroupTransition& t : kGroupTransitions) {
    if (t.from == from && t.on == on) return t.to;
  }
  return std::nullopt;
}

TrainingGroup::TrainingGroup(Options o, comm::Coordinator* coord, Connect connect,
                             const std::atomic<bool>* stop)
    : o_(std::move(o)),
      clock_(o_.clock != nullptr ? *o_.clock : common::SystemClock()),
      coord_(coord),
      connect_(std::move(connect)),
      stop_(stop),
      host_(o_.host) {}

// The heartbeats call into the group: they end before it does.
TrainingGroup::~TrainingGroup() { coord_->StopHeartbeats(); }

bool TrainingGroup::Apply(GroupEvent on) {
  std::optional<GroupState> to = NextGroupState(state_, on);
  if (!to) return false;
  state_ = *to;
  return true;
}

GroupState TrainingGroup::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

bool TrainingGroup::HostsCoordinator() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_ == o_.task_id;
}

bool TrainingGroup::StoppedTheGroup() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == GroupState::kStopped && host_ == o_.task_id;
}

bool TrainingGroup::OnHostLost(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == GroupState::kForming || state_ == GroupState::kLeft ||
      state_ == GroupState::kStopped || state_ == GroupState::kLost) {
    return false;
  }
  lost_hosts_.insert(host_);
  auto next = std::find_if(members_.begin(), members_.end(),
                           [&](int t) { return !lost_hosts_.contains(t); });
  if (next == members_.end()) return false;
  if (*next == o_.task_id && o_.server == nullptr) return false;
  const std::string lost = o_.task_name(host_);
  const int to = *next;
  host_ = to;
  if (to == o_.task_id) {
    o_.server->TakeOver(epoch_, members_,
                        absl::StrCat(lost, ", the coordination service's host, was lost; ", o_.task,
                                     " took the service over"));
    common::LogWarning("collective", why, "; ", o_.task,
                       " takes the coordination service over (the lowest surviving task)");
  } else {
    common::LogWarning("collective", why, "; following the coordination service to ",
                       o_.task_name(to));
  }
  coord_->MoveTo(o_.candidates[static_cast<size_t>(to)]);
  if (comm_) comm_->Abort(absl::UnavailableError("the coordination service moves: " + why));
  return true;
}

comm::Collective* TrainingGroup::collective() {
  std::lock_guard<std::mutex> lock(mu_);
  return comm_.get();
}

absl::StatusOr<comm::Membership> TrainingGroup::Form(const Connect& first) {
  const absl::Time deadline = clock_.Monotonic() + o_.setup_timeout;
  absl::StatusOr<comm::Membership> joined;
  absl::StatusOr<std::unique_ptr<comm::Collective>> c;
  for (;;) {
    const absl::Duration left = std::max(deadline - clock_.Monotonic(), absl::Seconds(1));
    joined = coord_->Join(left);
    // The first task's server stands by for a moment while it looks for a running group.
    while (!joined.ok() && absl::IsNotFound(joined.status()) && !stop_->load() &&
           clock_.Monotonic() < deadline) {
      absl::SleepFor(kRetryPause);
      joined = coord_->Join(std::max(deadline - clock_.Monotonic(), absl::Seconds(1)));
    }
    // A worker added to an elastic group waits while its admission would make a size that
    // does not divide the global batch.
    while (!joined.ok() && absl::IsResourceExhausted(joined.status()) && !stop_->load()) {
      common::LogWarning("collective", o_.task,
                         " waits to join the group: ", joined.status().message());
      joined = coord_->Join(o_.setup_timeout);
    }
    if (!joined.ok()) {
      if (absl::IsPermissionDenied(joined.status())) {
        return absl::PermissionDeniedError(joined.status().message());
      }
      std::lock_guard<std::mutex> lock(mu_);
      lost_ = comm::AsPeerLost(joined.status());
      Apply(GroupEvent::kGroupLost);
      return lost_;
    }
    c = first(joined->rank, joined->size(),
              std::max(deadline - clock_.Monotonic(), absl::Seconds(1)));
    if (c.ok()) break;
    // The epoch joined may end before its collective is connected: another worker was
    // admitted, or a member replaced, while the ranks exchanged addresses. A group that
    // re-forms in place takes the next epoch in; elsewhere the task ends (the whole group
    // restarts).
    if (!o_.regroups || !comm::IsPeerLost(c.status()) || stop_->load() ||
        clock_.Monotonic() >= deadline) {
      return c.status();
    }
    common::LogInfo("collective", "connecting the group of epoch ", joined->epoch,
                    " failed; joining again: ", c.status().message());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    comm_ = std::move(*c);
    epoch_ = joined->epoch;
    members_ = joined->tasks;
    Apply(GroupEvent::kFormed);
  }
  if (o_.server != nullptr) o_.server->SetInGroup();
  if (Moves()) coord_->OnHostLost([this](const std::string& why) { return OnHostLost(why); });
  coord_->StartHeartbeats(
      std::clamp(o_.peer_timeout / 10, absl::Milliseconds(100), absl::Seconds(2)), o_.peer_timeout,
      [this](absl::Status s) { OnGroupLost(std::move(s)); },
      [this](int64_t epoch, const std::string& why, bool planned) {
        OnNewEpoch(epoch, why, planned);
      });
  return joined;
}

void TrainingGroup::OnGroupLost(absl::Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Apply(GroupEvent::kGroupLost)) return;
  lost_ = comm::AsPeerLost(s);
  if (comm_) comm_->Abort(lost_);
}

void TrainingGroup::OnNewEpoch(int64_t epoch, const std::string& why, bool planned) {
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch_ >= epoch) return;
  if (planned) {
    Apply(GroupEvent::kPlannedChange);
  } else if (Apply(GroupEvent::kMemberLost) && comm_) {
    comm_->Abort(absl::UnavailableError("the group is re-forming: " + why));
  }
}

bool TrainingGroup::StopRequested() {
  const bool stop = stop_->load();
  if (!stop) return coord_->StopSeen();
  // A member of a group that re-forms in place (elastic, or recovering in place) leaves on its
  // own at the step boundary: the others go on (an elastic group without it, a fixed one with
  // its replacement). The coordinator's host does so only where the service moves, and only
  // once it has trained on for the window without another member stopping (they would raise
  // a regroup, in which a stopped host stops the group: the whole job is being stopped).
  // Elsewhere a stop is the whole group's.
  if (o_.elastic || o_.regroups) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool host = host_ == o_.task_id;
    if (host && Moves() && !coord_->StopSeen()) {
      const absl::Time now = clock_.Monotonic();
      if (stop_since_ == absl::InfiniteFuture()) stop_since_ = now;
      if (now - stop_since_ < o_.stop_alone_window) return false;
    }
    if (!host || Moves()) {
      Apply(GroupEvent::kStopAsked);
      return coord_->StopSeen();
    }
  }
  coord_->RequestStop();
  return true;
}

bool TrainingGroup::RegroupDue() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == GroupState::kChangeDue || state_ == GroupState::kLeaving;
}

absl::StatusOr<Regrouped> TrainingGroup::Regroup(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Apply(GroupEvent::kRegroup);
    if (regroup_deadline_ == absl::InfiniteFuture()) {
      regroup_deadline_ = clock_.Monotonic() + o_.rejoin_timeout;
    }
  }
  absl::Status last = why;
  for (;;) {
    if (state() == GroupState::kLost) {
      std::lock_guard<std::mutex> lock(mu_);
      return lost_;
    }
    // The host, asked to stop while the group re-forms (other members left first: the whole
    // job is stopping), stops the group; it checkpoints the boundary's state.
    if (stop_->load() && HostsCoordinator() && state() != GroupState::kLeaving) {
      coord_->RequestStop();
      std::lock_guard<std::mutex> lock(mu_);
      Apply(GroupEvent::kStopSeen);
      return absl::CancelledError("stopped by SIGTERM while the group was re-forming");
    }
    if (StopRequested()) {
      std::lock_guard<std::mutex> lock(mu_);
      Apply(GroupEvent::kStopSeen);
      return absl::CancelledError("stopped by SIGTERM while the group was re-forming");
    }
    if (state() == GroupState::kLeaving) {
      if (absl::Status s = coord_->Leave(); !s.ok()) {
        common::LogWarning("collective", o_.task,
                           " could not tell the group it leaves: ", s.message());
      }
      std::lock_guard<std::mutex> lock(mu_);
      Apply(GroupEvent::kLeft);
      return absl::CancelledError(absl::StrCat(
          o_.task,
          " left the group at a step boundary (stopped by SIGTERM; the other members go on ",
          o_.elastic ? "without it)" : "and take its replacement in)"));
    }
    const absl::Duration left = regroup_deadline_ - clock_.Monotonic();
    if (left <= absl::ZeroDuration()) {
      std::lock_guard<std::mutex> lock(mu_);
      lost_ = comm::PeerLostError(absl::StrCat("the group did not re-form within --rejoin-timeout=",
                                               absl::ToInt64Seconds(o_.rejoin_timeout),
                                               "s; last: ", last.message()));
      Apply(GroupEvent::kRejoinTimedOut);
      return lost_;
    }
    // An OK `why`: a planned change at a step boundary (elastic), not a failure.
    absl::StatusOr<comm::Membership> m =
        coord_->Join(std::min(left, absl::Seconds(5)), /*planned=*/why.ok());
    if (!m.ok()) {
      if (absl::IsPermissionDenied(m.status()) || absl::IsFailedPrecondition(m.status())) {
        std::lock_guard<std::mutex> lock(mu_);
        lost_ = absl::AbortedError(m.status().message());  // taken over: this process ends
        Apply(GroupEvent::kTakenOver);
        return lost_;
      }
      last = m.status();
      common::LogInfo("collective", "joining the group again: ", last.message());
      // A host that refuses or is a standby is asked again shortly (or followed elsewhere).
      if (absl::IsUnavailable(last) || absl::IsNotFound(last)) absl::SleepFor(kRetryPause);
      continue;
    }
    if (state() == GroupState::kLeaving) continue;  // asked to go while joining: leave (above)
    absl::StatusOr<std::unique_ptr<comm::Collective>> next =
        connect_(m->rank, m->size(), std::min(left, o_.peer_timeout));
    if (!next.ok()) {
      last = next.status();
      common::LogInfo("collective", "connecting the group of epoch ", m->epoch,
                      " failed; joining again: ", last.message());
      continue;
    }
    std::string replaced;
    for (int t : m->replaced) {
      absl::StrAppend(&replaced, replaced.empty() ? "" : ", ", o_.task_name(t));
    }
    std::unique_ptr<comm::Collective> old;
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(comm_);
    comm_ = std::move(*next);
    epoch_ = m->epoch;
    members_ = m->tasks;
    lost_hosts_.clear();
    Apply(GroupEvent::kFormed);
    regroup_deadline_ = absl::InfiniteFuture();
    return Regrouped{.comm = comm_.get(), .epoch = m->epoch, .replaced = replaced, .cause = m->why};
  }
}

absl::StatusOr<TrainResult> TrainingGroup::Finish(absl::StatusOr<TrainResult> result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!result.ok() && absl::IsAborted(result.status()) && state_ == GroupState::kLost) {
    return lost_;
  }
  return result;
}

}  // namespace lockstep::trainer
