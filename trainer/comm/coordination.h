#pragma once
// Coordination of a multi-worker job over gRPC (trainer/proto/coordination.proto). The chief
// (else worker 0) runs the server on its TF_CONFIG address; every task, the server's own
// included, is a client:
//   Join      rendezvous of the whole group (rank, world size) into a membership epoch;
//   Barrier   named barriers;
//   Set/Get   a key-value store for bootstrap data (each rank's ring address);
//   heartbeats every interval. The server declares a rank lost when it has not heard from it
//             for the peer timeout; a client that hears it, or cannot reach the server for the
//             peer timeout, reports a peer-lost status (peer_lost.h) through its callback (the
//             strategy then aborts its collectives and the trainer exits with a retryable code). A
//             stop request (SIGTERM) travels the same way.
//
// Membership epochs (in-place recovery). The group forms epoch 0 when every rank has joined.
// A Join while the group is formed begins the next epoch: a survivor whose collective failed
// rejoins, and so does the replacement of a lost rank (a new process: a new incarnation).
// The epoch forms when every rank has joined it again; its answer names the ranks whose
// process changed. A join whose answer was lost (its call timed out as the epoch formed) is
// answered with that epoch when retried, rather than beginning another. Heartbeat answers carry the
// epoch, so a task still blocked in the old epoch's collectives hears of the new one (the strategy
// aborts them and rejoins). With `recover_in_place`, a rank silent for the peer timeout begins a
// new epoch instead of ending the group, and the survivors wait for its replacement. Barriers and
// keys belong to the epoch they were made in: a wait in an older epoch ends with Aborted. A process
// whose rank was taken over by a newer incarnation hears that it is lost.
//
// Elastic groups (`max_world_size` set). Tasks are named by their TF_CONFIG position (the
// chiefs, then the workers: the task id); an epoch's members are ranked 0..size-1 in task
// order. A task new to the group (a worker added by a scale-up, whose TF_CONFIG lists more
// workers than the chief's) waits in a lobby until it can be admitted: it begins a *planned*
// epoch of the members and the lobby, all or none, when that size divides the global batch.
// A member asked to go (a scale-down) leaves, which begins a planned epoch without it (in a fixed
// group that recovers in place, a member stopped alone leaves too, and the planned epoch waits
// for its replacement instead). Members
// hear of a planned epoch through heartbeats, finish the step in flight and rejoin at the step
// boundary. An epoch forms only at a size that divides the global batch. Every call presents the
// job token; the server refuses others.
//
// The service moves (groups that re-form in place). Every task listens on its TF_CONFIG address,
// the first task's server hosting and the others' standing by (a standby answers Probe and
// refuses the rest NOT_FOUND). When a client finds the host gone (connections refused or its
// name gone for a moment, a fresh process at its address, or silence for the peer timeout), the
// training group moves every survivor to the lowest task of the last epoch but the lost host:
// that task's standby takes the service over (TakeOver: the next epoch, awaiting the same
// members), and the lost host's replacement, finding it by Probe, joins there as any
// replacement does. A process starting in such a group probes the others first, so it never
// serves beside a running group. Thread-safety: thread-safe.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace lockstep::trainer::comm {

class CoordinationServer {
 public:
  struct Options {
    int world_size = 1;
    std::string token;
    absl::Duration peer_timeout = absl::Seconds(30);
    // A silent rank begins a new membership epoch (the group waits for its replacement)
    // rather than ending the group.
    bool recover_in_place = false;
    // Elastic: tasks 0..max_world_size-1 may join, whatever their TF_CONFIG's size (0: the
    // group is fixed at world_size).
    int max_world_size = 0;
    // Elastic: every epoch's size divides it (0: any size).
    int64_t global_batch = 0;
    // What heartbeat silence is measured by (null: common::SystemClock()).
    common::Clock* clock = nullptr;
    // Listen without hosting until Activate or TakeOver (a group that re-forms in place).
    bool standby = false;
    int task_id = 0;  // this task, for Probe and messages
    int attempt = 0;  // the job's attempt; joins of another are refused
  };
  // Listens on host:port (port 0 picks one).
  static absl::StatusOr<std::unique_ptr<CoordinationServer>> Start(const std::string& host,
                                                                   int port, Options options);
  ~CoordinationServer();
  int port() const;

  // A standby begins hosting a new group (the first task, finding no group running).
  void Activate();
  // A standby takes the service over from a lost host: it begins the epoch after `epoch` (the
  // last this task saw), awaiting `tasks` (that epoch's members), and names `why`.
  void TakeOver(int64_t epoch, const std::vector<int>& tasks, std::string why);
  // This task's process trained in a formed epoch (Probe tells a starting process so).
  void SetInGroup();

  struct Impl;

 private:
  explicit CoordinationServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What Probe found at a task's address.
struct ProbeAnswer {
  bool hosting = false;
  bool in_group = false;
  int64_t epoch = 0;
  int attempt = 0;
  int task_id = 0;
};
// Asks the task listening at `address` what it is (no waiting for a server to come up).
absl::StatusOr<ProbeAnswer> ProbeCoordination(const std::string& address, const std::string& token,
                                              absl::Duration timeout);

// A formed membership epoch, as Join answers it.
struct Membership {
  int64_t epoch = 0;
  std::vector<int> replaced;  // tasks whose process changed since the previous epoch
  std::string why;            // what began the epoch ("" for the first)
  int rank = 0;               // this task's rank in the epoch
  std::vector<int> tasks;     // the members' task ids, by rank
  int size() const { return static_cast<int>(tasks.size()); }
};

// A task's membership calls, which the training group (strategy/training_group.h) makes;
// CoordinationClient serves them, a test's fake may.
class Coordinator {
 public:
  virtual ~Coordinator() = default;
  // See CoordinationClient.
  virtual absl::StatusOr<Membership> Join(absl::Duration timeout, bool planned = false) = 0;
  virtual absl::Status Leave() = 0;
  virtual void StartHeartbeats(
      absl::Duration interval, absl::Duration peer_timeout,
      std::function<void(absl::Status)> on_lost,
      std::function<void(int64_t, const std::string&, bool planned)> on_new_epoch = nullptr) = 0;
  // Ends the heartbeats (their callbacks are not called after it returns).
  virtual void StopHeartbeats() = 0;
  virtual void RequestStop() = 0;
  virtual bool StopSeen() const = 0;
  // Groups whose service moves: `lost` is called when the host is found gone (from the thread
  // whose call found it), with why; it answers whether the client moved to another host
  // (MoveTo) and goes on, rather than losing the group. Set before StartHeartbeats.
  virtual void OnHostLost(std::function<bool(const std::string& why)> lost) { (void)lost; }
  // Calls go to the service at `address` from now on.
  virtual void MoveTo(const std::string& address) { (void)address; }
};

class CoordinationClient final : public Coordinator {
 public:
  // `task_id`: this task's TF_CONFIG position (the chiefs, then the workers); `world_size`:
  // the tasks its TF_CONFIG lists. `clock` (null: common::SystemClock()) paces the heartbeats
  // and measures the coordinator's silence.
  CoordinationClient(const std::string& address, std::string token, int task_id, int world_size,
                     std::string task, common::Clock* clock = nullptr, int attempt = 0);
  ~CoordinationClient() override;

  // Waits for the server to come up and every rank to join, up to `timeout`. The first call
  // joins as a new process; a later one (after a collective failed) begins or joins the next
  // epoch. Keys and barriers from then on belong to the epoch joined. A task new to an elastic
  // group that is still waiting for admission at the deadline gets ResourceExhausted, naming
  // why, when the size it would make does not divide the global batch.
  // `planned`: a member rejoining at the step boundary of a planned change.
  absl::StatusOr<Membership> Join(absl::Duration timeout, bool planned = false) override;
  // Leaves the group at a step boundary; heartbeats then end. An elastic group re-forms
  // without the task (scaled down); a fixed one (in place) keeps its place, and the next
  // epoch forms when its replacement joins.
  absl::Status Leave() override;
  int64_t epoch() const { return epoch_; }
  absl::Status Barrier(const std::string& name, absl::Duration timeout);
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);

  // Starts heartbeats; `on_lost` is called once, from the heartbeat thread, with a peer-lost
  // status (peer_lost.h) naming the lost peer (heartbeats then end). `on_new_epoch`, when set,
  // is called from that thread whenever the group has begun an epoch newer than this task's,
  // with what began it and whether it is planned (finish the step, then rejoin) rather than
  // a lost peer's (abort the step).
  void StartHeartbeats(absl::Duration interval, absl::Duration peer_timeout,
                       std::function<void(absl::Status)> on_lost,
                       std::function<void(int64_t, const std::string&, bool planned)> on_new_epoch =
                           nullptr) override;
  void StopHeartbeats() override;
  // The next heartbeats tell the group this task was asked to stop.
  void RequestStop() override { stop_requested_ = true; }
  // Some task of the group was asked to stop.
  bool StopSeen() const override { return stop_seen_; }
  void OnHostLost(std::function<bool(const std::string& why)> lost) override;
  void MoveTo(const std::string& address) override;

 private:
  struct Impl;
  enum class HostHealth { kAnswers, kFailing, kMoved, kGone };
  // Records how a call to the host at `address` ended; once the host is found gone, asks the
  // OnHostLost handler to move (kMoved) or not (kGone).
  HostHealth NoteHost(const std::string& address, const absl::Status& s);
  bool HasHostLostHandler() const;
  std::unique_ptr<Impl> impl_;
  common::Clock* const clock_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> stop_seen_{false};
  std::atomic<int64_t> epoch_{-1};
  const uint64_t incarnation_;
  std::jthread heartbeat_;
};

}  // namespace lockstep::trainer::comm
