// The coordination service: rendezvous, barriers, the key-value store, the job token,
// heartbeats that turn a silent peer or a stop request into news for every task, and the
// membership epochs of in-place recovery.
#include "trainer/comm/coordination.h"

#include <future>
#include <latch>

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"
#include "trainer/comm/peer_lost.h"

namespace lockstep::trainer::comm {
namespace {

struct Group {
  std::unique_ptr<CoordinationServer> server;
  std::vector<std::unique_ptr<CoordinationClient>> clients;
  std::string address;
};

// `clock`: the server's and the clients' (the wall clock when null).
Group MakeGroup(int n, absl::Duration peer_timeout = absl::Seconds(30), bool in_place = false,
                int max_world_size = 0, int64_t global_batch = 0, common::Clock* clock = nullptr) {
  Group g;
  auto s = CoordinationServer::Start("127.0.0.1", 0,
                                     {.world_size = n,
                                      .token = "tok",
                                      .peer_timeout = peer_timeout,
                                      .recover_in_place = in_place,
                                      .max_world_size = max_world_size,
                                      .global_batch = global_batch,
                                      .clock = clock});
  EXPECT_TRUE(s.ok()) << s.status();
  g.server = std::move(*s);
  g.address = "127.0.0.1:" + std::to_string(g.server->port());
  for (int r = 0; r < n; ++r) {
    g.clients.push_back(std::make_unique<CoordinationClient>(g.address, "tok", r, n,
                                                             "worker " + std::to_string(r), clock));
  }
  return g;
}

absl::Status JoinAll(Group& g) {
  std::vector<std::future<absl::Status>> f;
  for (auto& c : g.clients) {
    f.push_back(
        std::async(std::launch::async, [&c] { return c->Join(absl::Seconds(20)).status(); }));
  }
  absl::Status first;
  for (auto& x : f) {
    absl::Status s = x.get();
    if (first.ok()) first = s;
  }
  return first;
}

TEST(CoordinationTest, JoinWaitsForEveryRankAndKeysTravel) {
  Group g = MakeGroup(3);
  // Alone, a join cannot complete.
  EXPECT_EQ(g.clients[0]->Join(absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(JoinAll(g).ok());
  // Get blocks until somebody sets the key.
  auto value = std::async(std::launch::async,
                          [&] { return g.clients[2]->Get("ring/0", absl::Seconds(20)); });
  ASSERT_TRUE(g.clients[0]->Set("ring/0", "host-a:1234").ok());
  ASSERT_TRUE(value.get().ok());
  EXPECT_EQ(*g.clients[1]->Get("ring/0", absl::Seconds(1)), "host-a:1234");
  EXPECT_EQ(g.clients[1]->Get("missing", absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(CoordinationTest, BarrierReleasesOnlyWhenAllArrive) {
  Group g = MakeGroup(3);
  ASSERT_TRUE(JoinAll(g).ok());
  EXPECT_EQ(g.clients[0]->Barrier("b1", absl::Milliseconds(200)).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::vector<std::future<absl::Status>> f;
  for (auto& c : g.clients) {
    f.push_back(
        std::async(std::launch::async, [&c] { return c->Barrier("b2", absl::Seconds(20)); }));
  }
  for (auto& x : f) EXPECT_TRUE(x.get().ok());
}

TEST(CoordinationTest, CallsWithoutTheJobTokenAreRefused) {
  Group g = MakeGroup(1);
  CoordinationClient intruder(g.address, "guess", 0, 1, "intruder");
  absl::Status s = intruder.Join(absl::Seconds(10)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(intruder.Set("k", "v").code(), absl::StatusCode::kPermissionDenied);
  // The real member is unaffected, and the intruder's key was never stored.
  ASSERT_TRUE(g.clients[0]->Join(absl::Seconds(10)).ok());
  EXPECT_FALSE(g.clients[0]->Get("k", absl::Milliseconds(200)).ok());
}

TEST(CoordinationTest, ASilentPeerIsReportedLostToTheOthers) {
  // Declared before the group: both heartbeat threads may report, the second after the test's
  // checks, until the group's destructor joins them.
  std::promise<absl::Status> lost;
  std::atomic<bool> reported{false};
  common::FakeClock clock;
  const absl::Time formed = clock.Monotonic();
  Group g = MakeGroup(3, absl::Seconds(10), false, 0, 0, &clock);
  ASSERT_TRUE(JoinAll(g).ok());
  // Ranks 0 and 1 heartbeat every (fake) second; rank 2 never does.
  for (int r : {0, 1}) {
    g.clients[r]->StartHeartbeats(absl::Seconds(1), absl::Seconds(10), [&](absl::Status s) {
      if (!reported.exchange(true)) lost.set_value(s);
    });
  }
  auto f = lost.get_future();
  // Within the peer timeout nobody is lost: both heartbeat at 9 s and sleep again (a pending
  // timer each) with no news.
  clock.WaitForTimers(2);
  clock.Advance(absl::Seconds(9));
  clock.WaitForTimers(2);
  EXPECT_NE(f.wait_for(std::chrono::milliseconds(0)), std::future_status::ready);
  // At 11 s the next heartbeat hears that rank 2 is lost.
  clock.Advance(absl::Seconds(2));
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  absl::Status s = f.get();
  EXPECT_TRUE(IsPeerLost(s)) << s;
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_NE(s.message().find("worker 2 sent no heartbeat for 11s"), std::string::npos) << s;
  EXPECT_EQ(clock.Monotonic() - formed, absl::Seconds(11));
}

TEST(CoordinationTest, AnUnreachableCoordinatorIsAPeerLost) {
  std::promise<absl::Status> lost;  // outlives the heartbeat thread, which the group joins
  common::FakeClock clock;
  Group g = MakeGroup(2, absl::Seconds(30), false, 0, 0, &clock);
  ASSERT_TRUE(JoinAll(g).ok());
  g.clients[1]->StartHeartbeats(absl::Seconds(1), absl::Seconds(20),
                                [&](absl::Status s) { lost.set_value(s); });
  g.server.reset();
  auto f = lost.get_future();
  // However its last heartbeat went, the client is asleep for the next; 25 s later the
  // coordinator has not answered for longer than the peer timeout.
  clock.WaitForTimers(1);
  clock.Advance(absl::Seconds(25));
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  absl::Status s = f.get();
  EXPECT_TRUE(IsPeerLost(s)) << s;
  EXPECT_NE(s.message().find("did not answer for"), std::string::npos) << s;
}

TEST(CoordinationTest, AStopRequestReachesEveryTask) {
  Group g = MakeGroup(2);
  ASSERT_TRUE(JoinAll(g).ok());
  for (auto& c : g.clients) {
    c->StartHeartbeats(absl::Milliseconds(20), absl::Seconds(30), [](absl::Status) {});
  }
  g.clients[1]->RequestStop();
  for (int i = 0; i < 1000 && !g.clients[0]->StopSeen(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));  // polling an outcome, bounded
  }
  EXPECT_TRUE(g.clients[0]->StopSeen());
}

// A survivor's rejoin begins epoch 1, which forms once every rank is in again, the lost rank
// through its replacement (a new process); the answer names the replaced rank, and keys of
// epoch 0 are not epoch 1's.
TEST(CoordinationTest, ARejoinBeginsANewEpochThatTheReplacementCompletes) {
  Group g = MakeGroup(3);
  ASSERT_TRUE(JoinAll(g).ok());
  EXPECT_EQ(g.clients[0]->epoch(), 0);
  ASSERT_TRUE(g.clients[0]->Set("ring/0", "old:1").ok());
  auto survivor0 =
      std::async(std::launch::async, [&] { return g.clients[0]->Join(absl::Seconds(20)); });
  auto survivor1 =
      std::async(std::launch::async, [&] { return g.clients[1]->Join(absl::Seconds(20)); });
  // Two of three: the epoch cannot form yet.
  EXPECT_EQ(survivor0.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  CoordinationClient replacement(g.address, "tok", 2, 3, "worker 2");
  absl::StatusOr<Membership> m = replacement.Join(absl::Seconds(20));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->epoch, 1);
  EXPECT_EQ(m->replaced, std::vector<int>{2});
  EXPECT_NE(m->why.find("lost a peer"), std::string::npos) << m->why;
  for (auto* f : {&survivor0, &survivor1}) {
    absl::StatusOr<Membership> s = f->get();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->epoch, 1);
    EXPECT_EQ(s->replaced, std::vector<int>{2});
  }
  EXPECT_EQ(g.clients[1]->Get("ring/0", absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(g.clients[0]->Set("ring/0", "new:2").ok());
  EXPECT_EQ(*replacement.Get("ring/0", absl::Seconds(1)), "new:2");
}

// Rank 0's join times out before the others arrive; they complete the epoch with it (it had
// registered). Its retry is answered with that epoch instead of beginning another, which
// would leave it waiting alone.
TEST(CoordinationTest, AJoinWhoseAnswerWasLostIsAnsweredWhenRetried) {
  Group g = MakeGroup(3);
  EXPECT_EQ(g.clients[0]->Join(absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  auto one = std::async(std::launch::async, [&] { return g.clients[1]->Join(absl::Seconds(20)); });
  auto two = std::async(std::launch::async, [&] { return g.clients[2]->Join(absl::Seconds(20)); });
  ASSERT_TRUE(one.get().ok());
  ASSERT_TRUE(two.get().ok());
  absl::StatusOr<Membership> retried = g.clients[0]->Join(absl::Seconds(5));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->epoch, 0);
  // A later join of the same process is a rejoin: the next epoch.
  auto rejoin =
      std::async(std::launch::async, [&] { return g.clients[0]->Join(absl::Seconds(20)); });
  one = std::async(std::launch::async, [&] { return g.clients[1]->Join(absl::Seconds(20)); });
  two = std::async(std::launch::async, [&] { return g.clients[2]->Join(absl::Seconds(20)); });
  ASSERT_TRUE(one.get().ok());
  ASSERT_TRUE(two.get().ok());
  absl::StatusOr<Membership> next = rejoin.get();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->epoch, 1);
}

// A task waiting on a key or a barrier of epoch 0 hears at once that the group moved on.
TEST(CoordinationTest, AWaitInAnOlderEpochEndsWhenTheGroupMovesOn) {
  Group g = MakeGroup(2);
  ASSERT_TRUE(JoinAll(g).ok());
  auto key =
      std::async(std::launch::async, [&] { return g.clients[1]->Get("never", absl::Seconds(30)); });
  auto barrier =
      std::async(std::launch::async, [&] { return g.clients[1]->Barrier("b", absl::Seconds(30)); });
  auto rejoin =
      std::async(std::launch::async, [&] { return g.clients[0]->Join(absl::Seconds(30)); });
  ASSERT_EQ(key.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  absl::Status k = key.get().status();
  EXPECT_EQ(k.code(), absl::StatusCode::kAborted) << k;
  EXPECT_NE(k.message().find("membership changed"), std::string::npos) << k;
  EXPECT_EQ(barrier.get().code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(g.clients[1]->Join(absl::Seconds(20)).ok());
  ASSERT_TRUE(rejoin.get().ok());
  EXPECT_EQ(g.clients[1]->epoch(), 1);
}

// In place: a silent rank begins a new epoch, which the heartbeats announce to the others
// (their collectives are then aborted and they rejoin); nobody is told the group is lost. The
// silent rank's old process, once replaced, is told it is lost.
TEST(CoordinationTest, InPlaceASilentRankBeginsANewEpochAndItsOldProcessIsLost) {
  // What the heartbeat threads touch outlives them (the group joins them).
  std::promise<std::pair<int64_t, std::string>> announced;
  std::atomic<bool> told{false}, lost{false};
  std::promise<absl::Status> old_lost;
  common::FakeClock clock;
  Group g = MakeGroup(3, absl::Seconds(10), /*in_place=*/true, 0, 0, &clock);
  ASSERT_TRUE(JoinAll(g).ok());
  for (int r : {0, 1}) {
    g.clients[r]->StartHeartbeats(
        absl::Seconds(1), absl::Seconds(30), [&](absl::Status) { lost = true; },
        [&](int64_t epoch, const std::string& why, bool planned) {
          EXPECT_FALSE(planned);
          if (!told.exchange(true)) announced.set_value({epoch, why});
        });
  }
  auto f = announced.get_future();
  // Second by second, ranks 0 and 1 heartbeat (each then sleeps: a pending timer) and rank 2
  // stays silent; past the 10 s peer timeout its silence begins epoch 1.
  for (int second = 0; second < 11; ++second) {
    clock.WaitForTimers(2);
    clock.Advance(absl::Seconds(1));
  }
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  auto [epoch, why] = f.get();
  EXPECT_EQ(epoch, 1);
  EXPECT_NE(why.find("worker 2 sent no heartbeat for 11s"), std::string::npos) << why;
  EXPECT_FALSE(lost);
  // The survivors and a replacement form epoch 1.
  CoordinationClient replacement(g.address, "tok", 2, 3, "worker 2");
  std::vector<std::future<absl::StatusOr<Membership>>> joins;
  joins.push_back(
      std::async(std::launch::async, [&] { return g.clients[0]->Join(absl::Seconds(20)); }));
  joins.push_back(
      std::async(std::launch::async, [&] { return g.clients[1]->Join(absl::Seconds(20)); }));
  joins.push_back(
      std::async(std::launch::async, [&] { return replacement.Join(absl::Seconds(20)); }));
  for (auto& j : joins) {
    auto m = j.get();
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->epoch, 1);
  }
  // The old rank-2 process wakes up: it was replaced.
  g.clients[2]->StartHeartbeats(absl::Milliseconds(50), absl::Seconds(30),
                                [&](absl::Status s) { old_lost.set_value(s); });
  auto o = old_lost.get_future();
  ASSERT_EQ(o.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_NE(o.get().message().find("taken over by a newer process"), std::string::npos);
  EXPECT_FALSE(lost);
}

// Heartbeats that report the first newer epoch they hear of, and whether it is planned.
struct Announcement {
  std::promise<std::tuple<int64_t, std::string, bool>> promise;
  std::atomic<bool> told{false};
  std::atomic<bool> lost{false};
  void Listen(CoordinationClient& c) {
    c.StartHeartbeats(
        absl::Milliseconds(50), absl::Seconds(30), [this](absl::Status) { lost = true; },
        [this](int64_t epoch, const std::string& why, bool planned) {
          if (!told.exchange(true)) promise.set_value({epoch, why, planned});
        });
  }
  // The announcement, or {-1, "", false} (a failure) when none came within 20 s.
  std::tuple<int64_t, std::string, bool> Wait() {
    auto f = promise.get_future();
    if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      ADD_FAILURE() << "no newer epoch was announced";
      return {-1, "", false};
    }
    return f.get();
  }
};

std::vector<absl::StatusOr<Membership>> JoinTogether(std::vector<CoordinationClient*> clients,
                                                     absl::Duration timeout = absl::Seconds(20),
                                                     bool planned = false) {
  std::vector<std::future<absl::StatusOr<Membership>>> f;
  for (CoordinationClient* c : clients) {
    f.push_back(std::async(std::launch::async,
                           [c, timeout, planned] { return c->Join(timeout, planned); }));
  }
  std::vector<absl::StatusOr<Membership>> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

// Elastic: a task beyond the chief's TF_CONFIG (a worker added by a scale-up) is admitted into
// a planned epoch, which the members hear of through heartbeats; ranks follow task order.
TEST(CoordinationTest, ElasticANewTaskIsAdmittedInAPlannedEpoch) {
  Announcement a;  // outlives the heartbeat threads, which the group joins
  Group g = MakeGroup(2, absl::Seconds(30), /*in_place=*/true, /*max_world_size=*/4);
  ASSERT_TRUE(JoinAll(g).ok());
  a.Listen(*g.clients[0]);
  // Task 3 (its TF_CONFIG lists four tasks); task 2 never comes.
  CoordinationClient newcomer(g.address, "tok", 3, 4, "worker 3");
  auto admitted = std::async(std::launch::async, [&] { return newcomer.Join(absl::Seconds(20)); });
  auto [epoch, why, planned] = a.Wait();
  EXPECT_EQ(epoch, 1);
  EXPECT_TRUE(planned);
  EXPECT_NE(why.find("worker 3 joined the group"), std::string::npos) << why;
  auto members = JoinTogether({g.clients[0].get(), g.clients[1].get()});
  absl::StatusOr<Membership> n = admitted.get();
  ASSERT_TRUE(n.ok()) << n.status();
  members.push_back(n);
  const std::vector<int> tasks = {0, 1, 3};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(members[i].ok()) << members[i].status();
    EXPECT_EQ(members[i]->epoch, 1);
    EXPECT_EQ(members[i]->rank, i);
    EXPECT_EQ(members[i]->tasks, tasks);
    EXPECT_TRUE(members[i]->replaced.empty());
  }
  EXPECT_FALSE(a.lost);
  // A task beyond the group's bound is refused by name.
  CoordinationClient beyond(g.address, "tok", 4, 5, "worker 4");
  absl::Status s = beyond.Join(absl::Seconds(5)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("beyond this group's 4 tasks"), std::string::npos) << s;
}

// Elastic: a member that leaves begins a planned epoch without it; the others re-form, ranked
// again, and barriers count the new membership.
TEST(CoordinationTest, ElasticAMemberLeavesAndTheOthersReform) {
  Announcement a;  // outlives the heartbeat threads, which the group joins
  Group g = MakeGroup(3, absl::Seconds(30), /*in_place=*/true, /*max_world_size=*/3);
  ASSERT_TRUE(JoinAll(g).ok());
  a.Listen(*g.clients[0]);
  ASSERT_TRUE(g.clients[1]->Leave().ok());
  auto [epoch, why, planned] = a.Wait();
  EXPECT_EQ(epoch, 1);
  EXPECT_TRUE(planned);
  EXPECT_NE(why.find("worker 1 left the group"), std::string::npos) << why;
  auto members = JoinTogether({g.clients[0].get(), g.clients[2].get()});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(members[i].ok()) << members[i].status();
    EXPECT_EQ(members[i]->rank, i);
    EXPECT_EQ(members[i]->tasks, (std::vector<int>{0, 2}));
  }
  auto b0 = std::async(std::launch::async,
                       [&] { return g.clients[0]->Barrier("after", absl::Seconds(20)); });
  EXPECT_TRUE(g.clients[2]->Barrier("after", absl::Seconds(20)).ok());
  EXPECT_TRUE(b0.get().ok());
  EXPECT_FALSE(a.lost);
}

// A fixed group that recovers in place: a member stopped alone (its pod deleted or evicted)
// leaves at a step boundary; the planned epoch keeps its place, so the others cannot form it
// alone, and its replacement (a new process) completes it with the state handed over.
TEST(CoordinationTest, InPlaceAMemberThatLeavesKeepsItsPlaceForItsReplacement) {
  Announcement a;  // outlives the heartbeat threads, which the group joins
  Group g = MakeGroup(3, absl::Seconds(30), /*in_place=*/true);
  ASSERT_TRUE(JoinAll(g).ok());
  a.Listen(*g.clients[0]);
  ASSERT_TRUE(g.clients[1]->Leave().ok());
  auto [epoch, why, planned] = a.Wait();
  EXPECT_EQ(epoch, 1);
  EXPECT_TRUE(planned);
  EXPECT_NE(why.find("worker 1 left the group (stopped by SIGTERM); its replacement is awaited"),
            std::string::npos)
      << why;
  // Without the replacement the epoch cannot form: the survivors' joins run out of time.
  auto alone = JoinTogether({g.clients[0].get(), g.clients[2].get()}, absl::Milliseconds(300),
                            /*planned=*/true);
  for (const auto& m : alone) {
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded) << m.status();
  }
  CoordinationClient replacement(g.address, "tok", 1, 3, "worker 1");
  auto members = JoinTogether({g.clients[0].get(), &replacement, g.clients[2].get()},
                              absl::Seconds(20), /*planned=*/true);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(members[i].ok()) << members[i].status();
    EXPECT_EQ(members[i]->epoch, 1);
    EXPECT_EQ(members[i]->rank, i);
    EXPECT_EQ(members[i]->tasks, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(members[i]->replaced, std::vector<int>{1});
  }
  EXPECT_FALSE(a.lost);
}

// Elastic with a global batch: newcomers are admitted all together, and only at a size that
// divides the batch; one that would make another size waits, and is told why.
TEST(CoordinationTest, ElasticAdmissionWaitsForASizeThatDividesTheGlobalBatch) {
  Announcement a;  // outlives the heartbeat threads, which the group joins
  Group g = MakeGroup(2, absl::Seconds(30), /*in_place=*/true, /*max_world_size=*/4,
                      /*global_batch=*/8);
  ASSERT_TRUE(JoinAll(g).ok());
  CoordinationClient third(g.address, "tok", 2, 3, "worker 2");
  absl::Status s = third.Join(absl::Milliseconds(800)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("the global batch 8 does not divide over 3"), std::string::npos) << s;
  a.Listen(*g.clients[0]);
  CoordinationClient fourth(g.address, "tok", 3, 4, "worker 3");
  auto newcomers = std::async(std::launch::async, [&] { return JoinTogether({&third, &fourth}); });
  auto [epoch, why, planned] = a.Wait();
  EXPECT_TRUE(planned);
  EXPECT_EQ(epoch, 1);
  auto members = JoinTogether({g.clients[0].get(), g.clients[1].get()});
  for (auto& m : newcomers.get()) members.push_back(m);
  for (const auto& m : members) {
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->size(), 4);
  }
}

// The service moves: tasks 1 and 2 stand by on their own addresses (a standby answers Probe
// and refuses the rest NOT_FOUND). The host is lost; the survivors' rejoins find its
// connections refused, they move to task 1, whose standby takes the service over, and the
// lost host's replacement, a fresh process, completes the next epoch as the replaced one.
// A process of another attempt is refused.
TEST(CoordinationTest, InPlaceTheServiceMovesToAStandbyWhenItsHostIsLost) {
  Group g = MakeGroup(3, absl::Seconds(30), /*in_place=*/true);
  std::vector<std::unique_ptr<CoordinationServer>> standby;
  std::vector<std::string> at = {g.address};
  for (int t = 1; t < 3; ++t) {
    auto s = CoordinationServer::Start(
        "127.0.0.1", 0,
        {.world_size = 3, .token = "tok", .recover_in_place = true, .standby = true, .task_id = t});
    ASSERT_TRUE(s.ok()) << s.status();
    at.push_back("127.0.0.1:" + std::to_string((*s)->port()));
    standby.push_back(std::move(*s));
  }
  ASSERT_TRUE(JoinAll(g).ok());
  absl::StatusOr<ProbeAnswer> host = ProbeCoordination(at[0], "tok", absl::Seconds(5));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->hosting);
  absl::StatusOr<ProbeAnswer> s1 = ProbeCoordination(at[1], "tok", absl::Seconds(5));
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_FALSE(s1->hosting);
  EXPECT_FALSE(s1->in_group);
  EXPECT_EQ(s1->task_id, 1);
  standby[0]->SetInGroup();
  EXPECT_TRUE(ProbeCoordination(at[1], "tok", absl::Seconds(5))->in_group);
  EXPECT_EQ(ProbeCoordination(at[1], "bad", absl::Seconds(5)).status().code(),
            absl::StatusCode::kPermissionDenied);
  CoordinationClient stray(at[2], "tok", 0, 3, "chief 0");
  EXPECT_EQ(stray.Join(absl::Seconds(5)).status().code(), absl::StatusCode::kNotFound);

  // Each survivor's handler moves it to task 1; task 1's own takes the service over.
  std::atomic<int> moved{0};
  for (int t = 1; t < 3; ++t) {
    CoordinationClient* c = g.clients[static_cast<size_t>(t)].get();
    c->OnHostLost([&, c, t](const std::string& why) {
      EXPECT_NE(why.find("connections were refused"), std::string::npos) << why;
      if (t == 1) standby[0]->TakeOver(0, {0, 1, 2}, "task 0, the host, was lost");
      c->MoveTo(at[1]);
      ++moved;
      return true;
    });
  }
  g.server.reset();
  for (int t = 1; t < 3; ++t) {
    absl::Status last;
    for (int i = 0; i < 50 && moved < t; ++i) {
      last = g.clients[static_cast<size_t>(t)]->Join(absl::Seconds(1)).status();
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_EQ(moved, t) << "task " << t << " never found the host gone: " << last;
  }
  CoordinationClient replacement(at[1], "tok", 0, 3, "chief 0");
  auto members = JoinTogether({&replacement, g.clients[1].get(), g.clients[2].get()});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(members[i].ok()) << members[i].status();
    EXPECT_EQ(members[i]->epoch, 1);
    EXPECT_EQ(members[i]->rank, i);
    EXPECT_EQ(members[i]->replaced, std::vector<int>{0});
    EXPECT_EQ(members[i]->why, "task 0, the host, was lost");
  }
  EXPECT_TRUE(ProbeCoordination(at[1], "tok", absl::Seconds(5))->hosting);
  CoordinationClient other_attempt(at[1], "tok", 2, 3, "worker 2", nullptr, /*attempt=*/1);
  absl::Status refused = other_attempt.Join(absl::Seconds(5)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("attempt 1"), std::string::npos) << refused;
}

}  // namespace
}  // namespace lockstep::trainer::comm
