#pragma once
// The membership of one task in a MultiWorkerMirrored group: which epoch's collective it trains
// over, whether the group is changing, and when it is gone. A state machine written as data
// (kGroupTransitions, as operator/api/job_state.h does for the job): an event is applied only
// where a row allows it, so every way the membership can move is listed here.
//
//   Forming     joining the group's first epoch (or, a replacement, the running group's);
//   Training    a formed epoch's collective is connected and the replica trains over it;
//   ChangeDue   a planned change (a worker joins or leaves an elastic group) was announced:
//               the replica finishes its step and regroups at the boundary;
//   Leaving     this task was asked to stop in a group that re-forms in place (elastic, or
//               recovering in place): it leaves at the boundary, the others go on (with its
//               replacement, in a fixed group). The coordinator's host leaves so only where the
//               service can move, and only when, for Options::stop_alone_window, no other member
//               has stopped too (a whole job being stopped checkpoints and stops instead);
//   Regrouping  rejoining the next epoch and connecting its collective (in-place recovery
//               after a collective failed, or a planned change), until --rejoin-timeout;
//   Left, Stopped, Lost: the end (left the group; stopped by SIGTERM while re-forming; the
//               group is gone for this task: coordinator lost, rejoin timed out, taken over).
//
// The coordination service moves (`candidates` set): when the client finds its host gone, every
// survivor follows the lowest task of the last epoch not found lost (the host's own standby
// server takes the service over there) and the replica regroups, the lost host's replacement
// joining the next epoch as any replacement does; the host's duties in the group (stopping it,
// and checkpointing then) go with it.
//
// Events come from three threads: the heartbeat thread (a new epoch, the coordinator lost), the
// replica's (stop requests, regroup), and whichever call found the host gone. The clock is injected
// (common/clock.h): the rejoin deadline is kept on its monotonic time line and tested by moving a
// fake clock. Thread-safety: thread-safe.

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "trainer/comm/collective.h"
#include "trainer/comm/coordination.h"
#include "trainer/strategy/data_parallel.h"

namespace lockstep::trainer {

enum class GroupState {
  kForming,
  kTraining,
  kChangeDue,
  kLeaving,
  kRegrouping,
  kLeft,
  kStopped,
  kLost,
};
enum class GroupEvent {
  kFormed,          // an epoch formed and its collective connected
  kPlannedChange,   // heartbeat: a planned epoch began (a join or leave at a step boundary)
  kMemberLost,      // heartbeat: an epoch began around a lost member (in place)
  kGroupLost,       // heartbeat: the coordinator is gone or declared the group lost
  kStopAsked,       // SIGTERM on this task, in a regrouping group it does not coordinate
  kRegroup,         // the replica begins regrouping (its collective failed, or at a boundary)
  kLeft,            // this task told the group it leaves
  kStopSeen,        // a stop request reached the group while it re-formed
  kRejoinTimedOut,  // the group did not re-form within --rejoin-timeout
  kTakenOver,       // a newer process holds this task's place
};
std::string_view GroupStateName(GroupState s);
std::string_view GroupEventName(GroupEvent e);

struct GroupTransition {
  GroupState from;
  GroupEvent on;
  GroupState to;
  std::string_view when;
};

inline constexpr std::array<GroupTransition, 24> kGroupTransitions{{
    {GroupState::kForming, GroupEvent::kFormed, GroupState::kTraining, "the first epoch formed"},
    {GroupState::kForming, GroupEvent::kGroupLost, GroupState::kLost, "no group to join"},
    {GroupState::kTraining, GroupEvent::kPlannedChange, GroupState::kChangeDue,
     "a member joins or leaves: finish the step, regroup at its boundary"},
    {GroupState::kTraining, GroupEvent::kMemberLost, GroupState::kTraining,
     "the collective is aborted: the step fails and the replica regroups"},
    {GroupState::kTraining, GroupEvent::kStopAsked, GroupState::kLeaving,
     "leave at the next step boundary, the others go on"},
    {GroupState::kTraining, GroupEvent::kRegroup, GroupState::kRegrouping,
     "a collective failed: rejoin the next epoch"},
    {GroupState::kTraining, GroupEvent::kGroupLost, GroupState::kLost, "the group is gone"},
    {GroupState::kChangeDue, GroupEvent::kMemberLost, GroupState::kChangeDue,
     "the collective is aborted; the regroup at the boundary follows"},
    {GroupState::kChangeDue, GroupEvent::kStopAsked, GroupState::kLeaving,
     "leave at the boundary instead"},
    {GroupState::kChangeDue, GroupEvent::kRegroup, GroupState::kRegrouping,
     "the step boundary: rejoin the planned epoch"},
    {GroupState::kChangeDue, GroupEvent::kGroupLost, GroupState::kLost, "the group is gone"},
    {GroupState::kLeaving, GroupEvent::kMemberLost, GroupState::kLeaving,
     "the collective is aborted: leave now"},
    {GroupState::kLeaving, GroupEvent::kRegroup, GroupState::kLeaving, "the boundary: leave"},
    {GroupState::kLeaving, GroupEvent::kStopSeen, GroupState::kStopped,
     "the whole group stops instead"},
    {GroupState::kLeaving, GroupEvent::kLeft, GroupState::kLeft, "the others go on without it"},
    {GroupState::kLeaving, GroupEvent::kGroupLost, GroupState::kLost, "the group is gone"},
    {GroupState::kRegrouping, GroupEvent::kFormed, GroupState::kTraining,
     "the next epoch formed and its collective connected"},
    {GroupState::kRegrouping, GroupEvent::kStopAsked, GroupState::kLeaving,
     "leave instead of rejoining"},
    {GroupState::kRegrouping, GroupEvent::kStopSeen, GroupState::kStopped,
     "stopped by SIGTERM while the group re-formed"},
    {GroupState::kRegrouping, GroupEvent::kRejoinTimedOut, GroupState::kLost,
     "the group did not re-form in time"},
    {GroupState::kRegrouping, GroupEvent::kTakenOver, GroupState::kLost,
     "a replacement took this task's place"},
    {GroupState::kRegrouping, GroupEvent::kGroupLost, GroupState::kLost, "the group is gone"},
    {GroupState::kRegrouping, GroupEvent::kPlannedChange, GroupState::kRegrouping,
     "the rejoin in flight takes the change in"},
    {GroupState::kRegrouping, GroupEvent::kMemberLost, GroupState::kRegrouping,
     "the rejoin in flight takes the loss in"},
}};

// The state an event moves `from` to; nullopt where no row allows it (the event is ignored).
std::optional<GroupState> NextGroupState(GroupState from, GroupEvent on);

class TrainingGroup {
 public:
  struct Options {
    std::string task;  // "worker 1", for the log and errors
    bool elastic = false;
    // The group re-forms in place (in-place recovery, or elastic): a first connection that the
    // group's next epoch interrupts joins that epoch.
    bool regroups = false;
    absl::Duration setup_timeout = absl::Minutes(5);
    absl::Duration peer_timeout = absl::Seconds(30);
    absl::Duration rejoin_timeout = absl::Minutes(10);
    // A task id's name in messages ("worker 2").
    std::function<std::string(int task_id)> task_name;
    common::Clock* clock = nullptr;  // null: common::SystemClock()
    // The service moves (a group that regroups): every task's TF_CONFIG address by task id
    // (empty: it stays with its first host), this task's id, the task hosting it at the start,
    // and this task's server (standby, or hosting), which takes the service over when it is
    // the lowest survivor.
    std::vector<std::string> candidates;
    int task_id = 0;
    int host = 0;
    comm::CoordinationServer* server = nullptr;
    // How long the host, asked to stop, watches whether other members stop too (a whole job
    // stopping) before it leaves alone.
    absl::Duration stop_alone_window = absl::Seconds(2);
  };
  // Connects the collective of a formed epoch: this task's rank, the epoch's size, and how
  // long the connection may take.
  using Connect = std::function<absl::StatusOr<std::unique_ptr<comm::Collective>>(
      int rank, int size, absl::Duration timeout)>;

  // `coord` and `stop` outlive the group.
  TrainingGroup(Options o, comm::Coordinator* coord, Connect connect,
                const std::atomic<bool>* stop);
  ~TrainingGroup();

  // Joins the group's first epoch (a replacement: the running group's) and connects its
  // collective through `first` (later epochs connect through the group's Connect); starts the
  // heartbeats. A task an elastic group cannot admit yet waits (logging
  // why) until it is admitted or stopped. Where the group regroups, an epoch that ends while
  // its collective connects (a peer-lost connection: another task joined or was replaced) is
  // followed by joining the next one, within the setup time. Errors: PermissionDenied (the job
  // token was refused); a peer-lost status (the group did not form in the setup time); the
  // connection's.
  absl::StatusOr<comm::Membership> Form(const Connect& first);
  // The collective of the current epoch (owned by the group).
  comm::Collective* collective();

  // What the replica asks (Replica::stop_requested, regroup_due, regroup).
  bool StopRequested();
  bool RegroupDue();
  absl::StatusOr<Regrouped> Regroup(const absl::Status& why);
  // The replica's result as the task's: a replica ended by the group's loss reports the loss.
  absl::StatusOr<TrainResult> Finish(absl::StatusOr<TrainResult> result);

  GroupState state() const;
  // This task hosts the coordination service now.
  bool HostsCoordinator() const;
  // This task stopped the whole group while it re-formed (its host, asked to stop): its state
  // is the step boundary's, which it checkpoints.
  bool StoppedTheGroup() const;

 private:
  // Applies `on` where kGroupTransitions allows it; true when a row matched. Holds mu_.
  bool Apply(GroupEvent on);
  bool Moves() const { return !o_.candidates.empty() && o_.regroups; }
  // The client found the host gone: follow the lowest surviving task. False: no task can take
  // the service over (the group is lost).
  bool OnHostLost(const std::string& why);
  void OnGroupLost(absl::Status s);
  void OnNewEpoch(int64_t epoch, const std::string& why, bool planned);

  const Options o_;
  common::Clock& clock_;
  comm::Coordinator* const coord_;
  const Connect connect_;
  const std::atomic<bool>* const stop_;
  mutable std::mutex mu_;
  GroupState state_ = GroupState::kForming;
  std::unique_ptr<comm::Collective> comm_;
  int64_t epoch_ = 0;
  absl::Status lost_;  // why the group is lost (kLost)
  absl::Time regroup_deadline_ = absl::InfiniteFuture();
  int host_;                  // the task hosting the service now
  std::vector<int> members_;  // the tasks of the last epoch formed, in rank order
  std::set<int> lost_hosts_;  // hosts found gone since it formed
  absl::Time stop_since_ = absl::InfiniteFuture();  // when the host was asked to stop
};

}  // namespace lockstep::trainer
