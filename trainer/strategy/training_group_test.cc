// The training group's membership state machine: the table itself, and the group driven by a
// scripted coordinator and a fake clock (no gRPC, no sleeps): heartbeat news, regrouping, the
// rejoin deadline, leaving, and a lost group.
#include "trainer/strategy/training_group.h"

#include <deque>
#include <set>

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"
#include "trainer/comm/peer_lost.h"

namespace lockstep::trainer {
namespace {

bool Terminal(GroupState s) {
  return s == GroupState::kLeft || s == GroupState::kStopped || s == GroupState::kLost;
}

TEST(GroupTransitionsTest, TheTableIsWellFormed) {
  std::set<std::pair<GroupState, GroupEvent>> seen;
  std::set<GroupState> reached{GroupState::kForming};
  for (const GroupTransition& t : kGroupTransitions) {
    EXPECT_TRUE(seen.insert({t.from, t.on}).second)
        << "two rows for " << GroupStateName(t.from) << " on " << GroupEventName(t.on);
    EXPECT_FALSE(Terminal(t.from)) << GroupStateName(t.from) << " is an end: no row leaves it";
    EXPECT_FALSE(t.when.empty());
    EXPECT_EQ(NextGroupState(t.from, t.on), t.to);
  }
  // Every state is reachable from Forming, and every live state can end (reach Lost).
  for (bool grew = true; grew;) {
    grew = false;
    for (const GroupTransition& t : kGroupTransitions) {
      if (reached.contains(t.from) && reached.insert(t.to).second) grew = true;
    }
  }
  EXPECT_EQ(reached.size(), 8u);
  for (GroupState s : reached) {
    if (!Terminal(s)) {
      EXPECT_EQ(NextGroupState(s, GroupEvent::kGroupLost), GroupState::kLost) << GroupStateName(s);
    }
  }
  // Unlisted moves are refused: a formed group is not formed again from an end.
  EXPECT_EQ(NextGroupState(GroupState::kLost, GroupEvent::kFormed), std::nullopt);
  EXPECT_EQ(NextGroupState(GroupState::kForming, GroupEvent::kPlannedChange), std::nullopt);
}

// A collective that records its abort.
class FakeCollective final : public comm::Collective {
 public:
  explicit FakeCollective(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "fake"; }
  comm::WorkPtr AllReduce(float*, int64_t) override { return nullptr; }
  comm::WorkPtr Broadcast(float*, int64_t, int) override { return nullptr; }
  comm::WorkPtr AllGather(const float*, int64_t, float*) override { return nullptr; }
  comm::WorkPtr ReduceScatter(const float*, int64_t, float*) override { return nullptr; }
  comm::WorkPtr Barrier() override { return nullptr; }
  void Abort(absl::Status why) override { aborted = std::move(why); }
  absl::Status aborted;

 private:
  int rank_, size_;
};

// Answers joins from a script; each answer may move the fake clock first (a join that takes
// its time). The heartbeat callbacks are kept for the test to call, as the heartbeat thread
// would.
class ScriptedCoordinator final : public comm::Coordinator {
 public:
  struct Answer {
    absl::StatusOr<comm::Membership> result;
    absl::Duration takes = absl::ZeroDuration();
  };
  explicit ScriptedCoordinator(common::FakeClock* clock) : clock_(clock) {}
  absl::StatusOr<comm::Membership> Join(absl::Duration timeout, bool planned) override {
    joins.push_back({timeout, planned});
    if (answers.empty()) {
      clock_->Advance(timeout);
      return absl::DeadlineExceededError("timed out waiting for every rank to join");
    }
    Answer a = answers.front();
    answers.pop_front();
    clock_->Advance(a.takes);
    return a.result;
  }
  absl::Status Leave() override {
    ++leaves;
    return absl::OkStatus();
  }
  void StartHeartbeats(absl::Duration, absl::Duration, std::function<void(absl::Status)> lost,
                       std::function<void(int64_t, const std::string&, bool)> epoch) override {
    on_lost = std::move(lost);
    on_new_epoch = std::move(epoch);
  }
  void StopHeartbeats() override {
    on_lost = nullptr;
    on_new_epoch = nullptr;
  }
  void RequestStop() override { stop_requested = true; }
  bool StopSeen() const override { return stop_seen; }
  void OnHostLost(std::function<bool(const std::string&)> lost) override {
    host_lost = std::move(lost);
  }
  void MoveTo(const std::string& address) override { moved_to.push_back(address); }

  std::deque<Answer> answers;
  std::vector<std::pair<absl::Duration, bool>> joins;  // timeout, planned
  int leaves = 0;
  bool stop_requested = false;
  bool stop_seen = false;
  std::function<void(absl::Status)> on_lost;
  std::function<void(int64_t, const std::string&, bool)> on_new_epoch;
  std::function<bool(const std::string&)> host_lost;
  std::vector<std::string> moved_to;

 private:
  common::FakeClock* clock_;
};

comm::Membership Epoch(int64_t epoch, int rank, int size, std::vector<int> replaced = {},
                       std::string why = "") {
  comm::Membership m{.epoch = epoch, .replaced = std::move(replaced), .why = std::move(why)};
  m.rank = rank;
  for (int t = 0; t < size; ++t) m.tasks.push_back(t);
  return m;
}

struct Fixture {
  common::FakeClock clock;
  ScriptedCoordinator coord{&clock};
  std::atomic<bool> stop{false};
  std::vector<FakeCollective*> connected;  // owned by the group
  std::unique_ptr<TrainingGroup> group;

  // `candidates`: the service moves (task `task_id`, or 0/1 as `hosts` says; `server` its own).
  explicit Fixture(bool elastic = false, bool hosts = false, bool regroups = false,
                   std::vector<std::string> candidates = {}, int task_id = -1,
                   comm::CoordinationServer* server = nullptr) {
    group = std::make_unique<TrainingGroup>(
        TrainingGroup::Options{.task = "worker 1",
                               .elastic = elastic,
                               .regroups = regroups,
                               .setup_timeout = absl::Seconds(300),
                               .peer_timeout = absl::Seconds(30),
                               .rejoin_timeout = absl::Seconds(30),
                               .task_name = [](int t) { return "worker " + std::to_string(t); },
                               .clock = &clock,
                               .candidates = std::move(candidates),
                               .task_id = task_id >= 0 ? task_id : (hosts ? 0 : 1),
                               .server = server},
        &coord, [this](int rank, int size, absl::Duration) { return Make(rank, size); }, &stop);
  }
  absl::StatusOr<std::unique_ptr<comm::Collective>> Make(int rank, int size) {
    auto c = std::make_unique<FakeCollective>(rank, size);
    connected.push_back(c.get());
    return std::unique_ptr<comm::Collective>(std::move(c));
  }
  void Form() {
    coord.answers.push_back({Epoch(0, 1, 3)});
    absl::StatusOr<comm::Membership> m =
        group->Form([this](int rank, int size, absl::Duration) { return Make(rank, size); });
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ(group->state(), GroupState::kTraining);
  }
};

// A worker admitted to an elastic group joins epoch 1; while the ranks exchange addresses a
// second new worker is admitted and epoch 2 begins, so the first connection fails (its key
// wait is aborted). A group that regroups joins epoch 2 and connects that; elsewhere the task
// ends with the peer-lost status, as before.
TEST(TrainingGroupTest, AFirstEpochThatEndsWhileConnectingIsFollowedByTheNext) {
  for (bool regroups : {true, false}) {
    SCOPED_TRACE(regroups ? "regroups" : "restarts the group");
    Fixture f(/*elastic=*/regroups, /*hosts=*/false, regroups);
    f.coord.answers.push_back({Epoch(1, 2, 3, {}, "worker 2 joined the group")});
    f.coord.answers.push_back({Epoch(2, 2, 4, {}, "worker 3 joined the group")});
    int attempts = 0;
    absl::StatusOr<comm::Membership> m =
        f.group->Form([&](int rank, int size, absl::Duration timeout) {
          EXPECT_GT(timeout, absl::ZeroDuration());
          if (++attempts == 1) {
            return absl::StatusOr<std::unique_ptr<comm::Collective>>(comm::PeerLostError(
                "getting ring/0: the group's membership changed (epoch 1 -> 2: worker 3 joined "
                "the group) while waiting for key 1/ring/0"));
          }
          return f.Make(rank, size);
        });
    if (!regroups) {
      ASSERT_FALSE(m.ok());
      EXPECT_TRUE(comm::IsPeerLost(m.status())) << m.status();
      EXPECT_EQ(f.coord.joins.size(), 1u);
      EXPECT_EQ(f.group->state(), GroupState::kForming);
      continue;
    }
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->epoch, 2);
    EXPECT_EQ(m->size(), 4);
    EXPECT_EQ(attempts, 2);
    ASSERT_EQ(f.coord.joins.size(), 2u);
    ASSERT_EQ(f.connected.size(), 1u);
    EXPECT_EQ(f.group->collective(), f.connected[0]);
    EXPECT_EQ(f.connected[0]->size(), 4);
    EXPECT_EQ(f.group->state(), GroupState::kTraining);
  }
}

// What is not a lost peer (a configuration no backend serves) ends the task at once, and so
// does a group that keeps moving on past the setup time.
TEST(TrainingGroupTest, TheFirstConnectionIsRetriedOnlyForALostPeerWithinTheSetupTime) {
  Fixture f(/*elastic=*/true, /*hosts=*/false, /*regroups=*/true);
  f.coord.answers.push_back({Epoch(1, 2, 3)});
  absl::StatusOr<comm::Membership> m = f.group->Form([](int, int, absl::Duration) {
    return absl::StatusOr<std::unique_ptr<comm::Collective>>(
        absl::FailedPreconditionError("no collective backend serves CPU tensors here"));
  });
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(m.status())) << m.status();
  EXPECT_EQ(f.coord.joins.size(), 1u);

  Fixture g(/*elastic=*/true, /*hosts=*/false, /*regroups=*/true);
  for (int e = 1; e <= 100; ++e) g.coord.answers.push_back({Epoch(e, 2, 3), absl::Seconds(10)});
  m = g.group->Form([&](int, int, absl::Duration) {
    return absl::StatusOr<std::unique_ptr<comm::Collective>>(
        comm::PeerLostError("the group's membership changed"));
  });
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(comm::IsPeerLost(m.status())) << m.status();
  // 300 s of setup at 10 s a join: 30 joins, not 100.
  EXPECT_EQ(g.coord.joins.size(), 30u);
}

TEST(TrainingGroupTest, AMemberLostAbortsTheCollectiveAndTheRegroupConnectsTheNextEpoch) {
  Fixture f;
  f.Form();
  ASSERT_EQ(f.connected.size(), 1u);
  EXPECT_EQ(f.group->collective(), f.connected[0]);
  // The heartbeat hears of epoch 1, begun around a lost member: the step's collective is
  // aborted so that no rank waits out the collective timeout.
  f.coord.on_new_epoch(1, "worker 2 sent no heartbeat for 31s", /*planned=*/false);
  EXPECT_TRUE(absl::IsUnavailable(f.connected[0]->aborted)) << f.connected[0]->aborted;
  EXPECT_NE(f.connected[0]->aborted.message().find("worker 2 sent no heartbeat"),
            std::string::npos);
  EXPECT_FALSE(f.group->RegroupDue());
  // The replica's step failed; it regroups. The first join finds the epoch still forming.
  f.coord.answers.push_back({absl::UnavailableError("connection refused"), absl::Seconds(5)});
  f.coord.answers.push_back({Epoch(1, 1, 3, {2}, "worker 2 was replaced"), absl::Seconds(3)});
  absl::StatusOr<Regrouped> g = f.group->Regroup(comm::PeerLostError("rank 2's connection reset"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->epoch, 1);
  EXPECT_EQ(g->replaced, "worker 2");
  EXPECT_EQ(g->cause, "worker 2 was replaced");
  ASSERT_EQ(f.connected.size(), 2u);
  EXPECT_EQ(g->comm, f.connected[1]);
  EXPECT_EQ(f.group->collective(), f.connected[1]);
  EXPECT_EQ(f.group->state(), GroupState::kTraining);
  // Not planned; each join waits no longer than what is left of the rejoin timeout (at most 5 s).
  ASSERT_EQ(f.coord.joins.size(), 3u);
  EXPECT_FALSE(f.coord.joins[1].second);
  EXPECT_EQ(f.coord.joins[1].first, absl::Seconds(5));
  // An announcement of the epoch the group is in already is old news.
  f.coord.on_new_epoch(1, "worker 2 was replaced", false);
  EXPECT_TRUE(f.connected[1]->aborted.ok());
}

TEST(TrainingGroupTest, TheRejoinDeadlineIsKeptByTheClock) {
  Fixture f;
  f.Form();
  // Nobody answers: every join times out after the 5 s it is given, on the fake clock.
  const absl::Time began = f.clock.Monotonic();
  absl::StatusOr<Regrouped> g = f.group->Regroup(comm::PeerLostError("worker 2 is gone"));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(comm::IsPeerLost(g.status())) << g.status();
  EXPECT_NE(g.status().message().find("did not re-form within --rejoin-timeout=30s"),
            std::string::npos)
      << g.status();
  EXPECT_NE(g.status().message().find("timed out waiting for every rank"), std::string::npos);
  EXPECT_EQ(f.coord.joins.size(), 1u + 6u);  // Form's, then 30 s in joins of 5 s
  EXPECT_EQ(f.clock.Monotonic() - began, absl::Seconds(30));
  EXPECT_EQ(f.group->state(), GroupState::kLost);
  // The replica's error is the loss's.
  absl::StatusOr<TrainResult> done = f.group->Finish(absl::AbortedError("step failed"));
  EXPECT_TRUE(comm::IsPeerLost(done.status())) << done.status();
}

TEST(TrainingGroupTest, TheGroupLostAbortsWithATypedStatusAndEndsTheReplica) {
  Fixture f;
  f.Form();
  f.coord.on_lost(comm::PeerLostError("the coordinator at chief-0:2222 did not answer for 31s"));
  EXPECT_EQ(f.group->state(), GroupState::kLost);
  EXPECT_TRUE(comm::IsPeerLost(f.connected[0]->aborted)) << f.connected[0]->aborted;
  // A regroup cannot help any more; the replica's aborted step reports the loss.
  absl::StatusOr<Regrouped> g = f.group->Regroup(comm::PeerLostError("step"));
  EXPECT_TRUE(comm::IsPeerLost(g.status()));
  EXPECT_NE(g.status().message().find("did not answer for 31s"), std::string::npos);
  EXPECT_EQ(f.coord.joins.size(), 1u);  // no rejoin was tried
  absl::StatusOr<TrainResult> done =
      f.group->Finish(absl::AbortedError("peer lost: the collective was aborted"));
  EXPECT_NE(done.status().message().find("did not answer"), std::string::npos);
  // An OK result stays the replica's.
  EXPECT_TRUE(f.group->Finish(TrainResult{.steps = 7}).ok());
}

TEST(TrainingGroupTest, APlannedChangeIsDueAtTheBoundaryAndRejoinsAsPlanned) {
  Fixture f(/*elastic=*/true);
  f.Form();
  f.coord.on_new_epoch(1, "worker 3 joined the group", /*planned=*/true);
  EXPECT_EQ(f.group->state(), GroupState::kChangeDue);
  EXPECT_TRUE(f.group->RegroupDue());
  EXPECT_TRUE(f.connected[0]->aborted.ok());  // the step in flight finishes
  f.coord.answers.push_back({Epoch(1, 1, 4, {}, "worker 3 joined the group")});
  absl::StatusOr<Regrouped> g = f.group->Regroup(absl::OkStatus());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(f.coord.joins.back().second);  // planned
  EXPECT_EQ(g->comm->size(), 4);
  EXPECT_FALSE(f.group->RegroupDue());
  EXPECT_EQ(f.group->state(), GroupState::kTraining);
}

TEST(TrainingGroupTest, AStoppedElasticMemberLeavesAndTheOthersGoOn) {
  Fixture f(/*elastic=*/true, /*hosts=*/false);
  f.Form();
  EXPECT_FALSE(f.group->StopRequested());
  f.stop = true;
  // Its own stop does not stop the group: it leaves at the boundary.
  EXPECT_FALSE(f.group->StopRequested());
  EXPECT_FALSE(f.coord.stop_requested);
  EXPECT_EQ(f.group->state(), GroupState::kLeaving);
  EXPECT_TRUE(f.group->RegroupDue());
  absl::StatusOr<Regrouped> g = f.group->Regroup(absl::OkStatus());
  EXPECT_TRUE(absl::IsCancelled(g.status())) << g.status();
  EXPECT_NE(g.status().message().find("worker 1 left the group"), std::string::npos);
  EXPECT_EQ(f.coord.leaves, 1);
  EXPECT_EQ(f.coord.joins.size(), 1u);
  EXPECT_EQ(f.group->state(), GroupState::kLeft);
}

// A fixed group that recovers in place: a member stopped alone (a deleted or evicted pod)
// leaves at the boundary as in an elastic group, and its replacement takes its place; the
// coordinator's host, stopped, still stops the whole group.
TEST(TrainingGroupTest, AStoppedMemberOfAnInPlaceGroupLeavesAndTheHostStopsTheGroup) {
  Fixture f(/*elastic=*/false, /*hosts=*/false, /*regroups=*/true);
  f.Form();
  f.stop = true;
  EXPECT_FALSE(f.group->StopRequested());
  EXPECT_FALSE(f.coord.stop_requested);
  EXPECT_EQ(f.group->state(), GroupState::kLeaving);
  EXPECT_TRUE(f.group->RegroupDue());
  absl::StatusOr<Regrouped> g = f.group->Regroup(absl::OkStatus());
  EXPECT_TRUE(absl::IsCancelled(g.status())) << g.status();
  EXPECT_NE(g.status().message().find("take its replacement in"), std::string::npos) << g.status();
  EXPECT_EQ(f.coord.leaves, 1);
  EXPECT_EQ(f.group->state(), GroupState::kLeft);

  Fixture host(/*elastic=*/false, /*hosts=*/true, /*regroups=*/true);
  host.Form();
  host.stop = true;
  EXPECT_TRUE(host.group->StopRequested());
  EXPECT_TRUE(host.coord.stop_requested);
  EXPECT_EQ(host.group->state(), GroupState::kTraining);
  EXPECT_EQ(host.coord.leaves, 0);
}

// Where the service moves, the host asked to stop trains on for the window: a whole job being
// stopped reaches the others in it (they leave, the group regroups, and the host stops the
// group, checkpointing); alone past it, the host leaves as any member does.
TEST(TrainingGroupTest, WhereTheServiceMovesAHostStoppedAloneLeavesAfterTheWindow) {
  const std::vector<std::string> at = {"a:0", "a:1", "a:2"};
  Fixture alone(/*elastic=*/false, /*hosts=*/true, /*regroups=*/true, at);
  alone.Form();
  alone.stop = true;
  EXPECT_FALSE(alone.group->StopRequested());
  EXPECT_EQ(alone.group->state(), GroupState::kTraining);
  alone.clock.Advance(absl::Milliseconds(1999));
  EXPECT_FALSE(alone.group->StopRequested());
  EXPECT_FALSE(alone.group->RegroupDue());
  alone.clock.Advance(absl::Milliseconds(1));
  EXPECT_FALSE(alone.group->StopRequested());
  EXPECT_EQ(alone.group->state(), GroupState::kLeaving);
  EXPECT_TRUE(alone.group->RegroupDue());
  absl::StatusOr<Regrouped> left = alone.group->Regroup(absl::OkStatus());
  EXPECT_TRUE(absl::IsCancelled(left.status())) << left.status();
  EXPECT_EQ(alone.coord.leaves, 1);
  EXPECT_FALSE(alone.coord.stop_requested);
  EXPECT_FALSE(alone.group->StoppedTheGroup());

  Fixture whole(/*elastic=*/false, /*hosts=*/true, /*regroups=*/true, at);
  whole.Form();
  whole.stop = true;
  EXPECT_FALSE(whole.group->StopRequested());
  whole.coord.on_new_epoch(1, "worker 2 left the group", /*planned=*/true);
  EXPECT_TRUE(whole.group->RegroupDue());
  absl::StatusOr<Regrouped> stopped = whole.group->Regroup(absl::OkStatus());
  EXPECT_TRUE(absl::IsCancelled(stopped.status())) << stopped.status();
  EXPECT_TRUE(whole.coord.stop_requested);
  EXPECT_EQ(whole.coord.leaves, 0);
  EXPECT_TRUE(whole.group->StoppedTheGroup());

  // Where the service cannot move, the host's stop is the group's at once.
  Fixture fixed(/*elastic=*/false, /*hosts=*/true, /*regroups=*/true);
  fixed.Form();
  fixed.stop = true;
  EXPECT_TRUE(fixed.group->StopRequested());
  EXPECT_TRUE(fixed.coord.stop_requested);
}

// The host found gone: a member follows the lowest task of the epoch not found lost, aborting
// its collective (the replica regroups there); the lowest survivor's own standby takes the
// service over, carrying the epoch on. A formed epoch forgets the hosts found lost.
TEST(TrainingGroupTest, AHostFoundGoneIsFollowedToTheLowestSurvivingTask) {
  auto standby = comm::CoordinationServer::Start(
      "127.0.0.1", 0, {.world_size = 3, .token = "tok", .standby = true, .task_id = 1});
  ASSERT_TRUE(standby.ok()) << standby.status();
  const std::string self = "127.0.0.1:" + std::to_string((*standby)->port());
  const std::vector<std::string> at = {"a:0", self, "a:2"};

  Fixture follower(/*elastic=*/false, /*hosts=*/false, /*regroups=*/true, at, /*task_id=*/2);
  follower.Form();
  ASSERT_TRUE(follower.coord.host_lost);
  EXPECT_TRUE(follower.coord.host_lost("the host at a:0 is gone"));
  EXPECT_EQ(follower.coord.moved_to, std::vector<std::string>{self});
  EXPECT_TRUE(absl::IsUnavailable(follower.connected.back()->aborted))
      << follower.connected.back()->aborted;
  EXPECT_FALSE(follower.group->HostsCoordinator());
  // Task 1 gone too: task 2, itself, without a server of its own here, cannot host.
  EXPECT_FALSE(follower.coord.host_lost("the host at " + self + " is gone"));

  Fixture lowest(/*elastic=*/false, /*hosts=*/false, /*regroups=*/true, at, /*task_id=*/1,
                 standby->get());
  lowest.Form();
  EXPECT_TRUE(lowest.coord.host_lost("the host at a:0 is gone"));
  EXPECT_TRUE(lowest.group->HostsCoordinator());
  EXPECT_EQ(lowest.coord.moved_to, std::vector<std::string>{self});
  absl::StatusOr<comm::ProbeAnswer> p = comm::ProbeCoordination(self, "tok", absl::Seconds(5));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->hosting);
  EXPECT_EQ(p->epoch, 1);  // the epoch after the last one the group formed
  lowest.coord.answers.push_back({Epoch(1, 1, 3, {0}, "worker 0, the host, was lost")});
  absl::StatusOr<Regrouped> g = lowest.group->Regroup(comm::PeerLostError("the ring broke"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->replaced, "worker 0");
  // Hosting now, the task's stop waits out the window as the first host's did.
  lowest.stop = true;
  EXPECT_FALSE(lowest.group->StopRequested());
}

TEST(TrainingGroupTest, AStopOutsideAnElasticGroupIsTheWholeGroups) {
  Fixture f(/*elastic=*/false);
  f.Form();
  f.stop = true;
  EXPECT_TRUE(f.group->StopRequested());
  EXPECT_TRUE(f.coord.stop_requested);  // the heartbeats tell the others
  absl::StatusOr<Regrouped> g = f.group->Regroup(comm::PeerLostError("worker 2 is gone"));
  EXPECT_TRUE(absl::IsCancelled(g.status())) << g.status();
  EXPECT_EQ(f.group->state(), GroupState::kStopped);
  // A stop another task asked for reaches this one through the coordinator.
  Fixture other;
  other.Form();
  EXPECT_FALSE(other.group->StopRequested());
  other.coord.stop_seen = true;
  EXPECT_TRUE(other.group->StopRequested());
}

TEST(TrainingGroupTest, TheHeartbeatsEndBeforeTheGroupDoes) {
  Fixture f;
  f.Form();
  ASSERT_TRUE(f.coord.on_lost);
  f.group.reset();  // the heartbeat callbacks point into the group
  EXPECT_FALSE(f.coord.on_lost);
  EXPECT_FALSE(f.coord.on_new_epoch);
}

TEST(TrainingGroupTest, ATaskTakenOverEndsAndAnUnformedGroupIsAPeerLoss) {
  Fixture f;
  f.Form();
  f.coord.answers.push_back(
      {absl::FailedPreconditionError("worker 1 was taken over by a newer process")});
  absl::StatusOr<Regrouped> g = f.group->Regroup(comm::PeerLostError("reset"));
  EXPECT_TRUE(absl::IsAborted(g.status())) << g.status();
  EXPECT_NE(g.status().message().find("taken over"), std::string::npos);
  EXPECT_EQ(f.group->state(), GroupState::kLost);

  Fixture never;  // the group never forms in the setup time
  absl::StatusOr<comm::Membership> m =
      never.group->Form([&](int rank, int size, absl::Duration) { return never.Make(rank, size); });
  EXPECT_TRUE(comm::IsPeerLost(m.status())) << m.status();
  EXPECT_EQ(never.group->state(), GroupState::kLost);
  EXPECT_TRUE(never.connected.empty());
  // A refused job token is a configuration error, not a loss.
  Fixture refused;
  refused.coord.answers.push_back({absl::PermissionDeniedError("the job token was refused")});
  m = refused.group->Form(
      [&](int rank, int size, absl::Duration) { return refused.Make(rank, size); });
  EXPECT_TRUE(absl::IsPermissionDenied(m.status())) << m.status();
}

}  // namespace
}  // namespace lockstep::trainer
