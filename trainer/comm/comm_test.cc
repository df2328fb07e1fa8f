// The collective backends, against the same expectations: {in-process, TCP with the ring, TCP
// with halving-doubling} x {2..8 ranks} x sizes from 1 element up (64 Mi elements in the large
// cases), including sizes the rank count does not divide; bit-identical results on every rank;
// failures (a peer gone, a peer silent, a wrong token) end in errors, never hangs; ranks that
// finish and leave at once do not fail the others.
#include <future>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "trainer/comm/in_process.h"
#include "trainer/comm/peer_link.h"
#include "trainer/comm/ring.h"

namespace lockstep::trainer::comm {
namespace {

// The TCP backend runs once per all-reduce algorithm, forced for every size.
enum class Backend { kInProcess, kRing, kHalvingDoubling };

std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kInProcess:
      return "InProcess";
    case Backend::kRing:
      return "Ring";
    case Backend::kHalvingDoubling:
      return "HalvingDoubling";
  }
  return "";
}

struct GroupOptions {
  absl::Duration timeout = absl::Seconds(60);
  std::vector<std::string> tokens;  // per rank; default all "secret"
  absl::Duration connect_timeout = absl::Seconds(30);
  int64_t unit_bytes = 64 << 10;  // many units per chunk even for modest sizes
};

// One collective per rank, made concurrently (ring setup needs every rank at once).
std::vector<absl::StatusOr<std::unique_ptr<Collective>>> MakeGroup(Backend b, int n,
                                                                   GroupOptions o = {}) {
  std::vector<absl::StatusOr<std::unique_ptr<Collective>>> out;
  if (b == Backend::kInProcess) {
    auto group = InProcessGroup::Create(n, o.timeout);
    for (int r = 0; r < n; ++r) out.emplace_back(group->Member(r));
    return out;
  }
  std::vector<std::unique_ptr<RingListener>> listeners;
  std::vector<std::string> addresses;
  for (int r = 0; r < n; ++r) {
    auto l = RingListener::Bind("127.0.0.1", 0);
    EXPECT_TRUE(l.ok()) << l.status();
    addresses.push_back("127.0.0.1:" + std::to_string((*l)->port()));
    listeners.push_back(std::move(*l));
  }
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Collective>>>> futures;
  for (int r = 0; r < n; ++r) {
    RingOptions ro;
    ro.rank = r;
    ro.addresses = addresses;
    ro.listener = std::move(listeners[r]);
    ro.token = o.tokens.empty() ? "secret" : o.tokens[r];
    ro.timeout = o.timeout;
    ro.connect_timeout = o.connect_timeout;
    ro.unit_bytes = o.unit_bytes;
    ro.all_reduce = b == Backend::kHalvingDoubling ? Algorithm::kHalvingDoubling : Algorithm::kRing;
    futures.push_back(std::async(
        std::launch::async, [ro = std::move(ro)]() mutable { return ConnectRing(std::move(ro)); }));
  }
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

std::vector<std::unique_ptr<Collective>> MustGroup(Backend b, int n, GroupOptions o = {}) {
  std::vector<std::unique_ptr<Collective>> out;
  for (auto& c : MakeGroup(b, n, o)) {
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) out.push_back(std::move(*c));
  }
  return out;
}

// Runs fn(rank) on one thread per rank.
void OnEveryRank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// Exactly representable values, so sums are exact whatever the order.
float Value(int rank, int64_t i) { return static_cast<float>(i % 97) + static_cast<float>(rank); }

TEST(ChunkRangeTest, CoversEveryElementOnceWithSizesDifferingByAtMostOne) {
  for (int64_t n : {0, 1, 5, 7, 8, 1001}) {
    for (int parts : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        Range r = ChunkRange(n, parts, i);
        EXPECT_EQ(r.begin, next);
        EXPECT_TRUE(r.size() == n / parts || r.size() == n / parts + 1);
        next = r.end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

using SweepParam = std::tuple<Backend, int, int64_t>;
class CollectiveSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(CollectiveSweep, AllReduceSumsBroadcastAllGatherAndReduceScatterAgree) {
  const auto [backend, n, size] = GetParam();
  // The larger sizes in units over PeerLink::kSplitBytes, which take a connection per
  // direction, with a chunk's last unit under it, which shares one: both kinds in one run.
  GroupOptions o;
  if (size >= 1000003) o.unit_bytes = 160 << 10;
  static_assert((160 << 10) > PeerLink::kSplitBytes);
  auto group = MustGroup(backend, n, o);
  ASSERT_EQ(static_cast<int>(group.size()), n);
  OnEveryRank(n, [&, n = n, size = size](int r) {
    Collective& c = *group[r];
    // All-reduce.
    std::vector<float> data(size);
    for (int64_t i = 0; i < size; ++i) data[i] = Value(r, i);
    ASSERT_TRUE(c.AllReduce(data.data(), size)->Wait().ok());
    for (int64_t i = 0; i < size; ++i) {
      const float want = static_cast<float>(n * (i % 97) + n * (n - 1) / 2);
      if (data[i] != want) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << data[i] << " != " << want;
        return;
      }
    }
    if (size > (1 << 22)) return;  // the large sizes check the all-reduce path only
    // Broadcast from the last rank.
    std::vector<float> b(size, static_cast<float>(r));
    ASSERT_TRUE(c.Broadcast(b.data(), size, n - 1)->Wait().ok());
    EXPECT_EQ(b, std::vector<float>(size, static_cast<float>(n - 1)));
    // All-gather.
    std::vector<float> mine(size), all(size * n);
    for (int64_t i = 0; i < size; ++i) mine[i] = Value(r, i);
    ASSERT_TRUE(c.AllGather(mine.data(), size, all.data())->Wait().ok());
    for (int k = 0; k < n; ++k) {
      for (int64_t i = 0; i < size; ++i) {
        ASSERT_EQ(all[k * size + i], Value(k, i)) << "rank " << r << " slot " << k << " i " << i;
      }
    }
    // Reduce-scatter.
    const Range chunk = ChunkRange(size, n, r);
    std::vector<float> out(chunk.size());
    ASSERT_TRUE(c.ReduceScatter(mine.data(), size, out.data())->Wait().ok());
    for (int64_t i = 0; i < chunk.size(); ++i) {
      const int64_t g = chunk.begin + i;
      ASSERT_EQ(out[i], static_cast<float>(n * (g % 97) + n * (n - 1) / 2)) << "rank " << r;
    }
    ASSERT_TRUE(c.Barrier()->Wait().ok());
  });
}

std::string SweepName(const ::testing::TestParamInfo<SweepParam>& info) {
  return BackendName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
         "ranks_" + std::to_string(std::get<2>(info.param)) + "elems";
}

const auto kAllBackends =
    ::testing::Values(Backend::kInProcess, Backend::kRing, Backend::kHalvingDoubling);

INSTANTIATE_TEST_SUITE_P(Sizes, CollectiveSweep,
                         ::testing::Combine(kAllBackends, ::testing::Values(2, 3, 4, 5, 8),
                                            ::testing::Values(1, 2, 7, 1000, 65537, 1000003)),
                         SweepName);
// 64 Mi elements (256 MiB per rank).
INSTANTIATE_TEST_SUITE_P(Large, CollectiveSweep,
                         ::testing::Combine(kAllBackends, ::testing::Values(2, 3, 4),
                                            ::testing::Values(int64_t{64} << 20)),
                         SweepName);

// Ranks that each tear their backend down the moment their own all-reduce is done, as a
// process exits after its last step: a rank that finishes first (its last bytes sent, not yet
// read) must not fail a peer still receiving. 4 ranks, large buffers, repeated.
class LeaveWhenDone : public ::testing::TestWithParam<Backend> {};

TEST_P(LeaveWhenDone, RanksThatFinishAndLeaveAtOnceDoNotFailTheOthers) {
  const int n = 4;
  const int64_t size = int64_t{8} << 20;
  for (int round = 0; round < 4; ++round) {
    auto group = MustGroup(GetParam(), n);
    ASSERT_EQ(static_cast<int>(group.size()), n);
    std::vector<absl::Status> got(n);
    OnEveryRank(n, [&](int r) {
      std::vector<float> data(size, static_cast<float>(r));
      got[r] = group[r]->AllReduce(data.data(), size)->Wait(absl::Seconds(60));
      if (got[r].ok() && data.back() != 6.0f) got[r] = absl::InternalError("wrong sum");
      group[r].reset();  // leave at once
    });
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(got[r].ok()) << "round " << round << " rank " << r << ": " << got[r];
  }
}

INSTANTIATE_TEST_SUITE_P(Tcp, LeaveWhenDone,
                         ::testing::Values(Backend::kRing, Backend::kHalvingDoubling),
                         [](const auto& p) { return BackendName(p.param); });

class CollectiveBehaviour : public ::testing::TestWithParam<Backend> {};

TEST_P(CollectiveBehaviour, ManyOperationsInFlightCompleteInIssueOrderWithIdenticalBits) {
  const int n = 4;
  auto group = MustGroup(GetParam(), n);
  ASSERT_EQ(group.size(), 4u);
  std::vector<std::vector<std::vector<float>>> results(n);
  OnEveryRank(n, [&](int r) {
    std::mt19937 rng(static_cast<uint32_t>(r + 1));
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<std::vector<float>> bufs(12);
    std::vector<WorkPtr> works;
    for (size_t k = 0; k < bufs.size(); ++k) {
      bufs[k].resize(1000 * (k + 1) + 3);
      for (float& x : bufs[k]) x = u(rng);
      works.push_back(group[r]->AllReduce(bufs[k].data(), static_cast<int64_t>(bufs[k].size())));
    }
    for (auto& w : works) ASSERT_TRUE(w->Wait(absl::Seconds(60)).ok());
    results[r] = std::move(bufs);
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(results[r], results[0]) << "rank " << r;
}

TEST_P(CollectiveBehaviour, APeerThatStopsIssuingFailsTheOthersWithinTheTimeout) {
  GroupOptions o;
  o.timeout = absl::Milliseconds(500);
  auto group = MustGroup(GetParam(), 3, o);
  ASSERT_EQ(group.size(), 3u);
  // Ranks 0 and 1 all-reduce; rank 2 never does.
  std::vector<absl::Status> got(2);
  OnEveryRank(2, [&](int r) {
    std::vector<float> data(100000, 1.0f);
    got[r] = group[r]->AllReduce(data.data(), 100000)->Wait();
  });
  // Both fail; at least one by the timeout (over TCP the other may first see its neighbour
  // give up and close the connection).
  EXPECT_FALSE(got[0].ok());
  EXPECT_FALSE(got[1].ok());
  EXPECT_TRUE(got[0].code() == absl::StatusCode::kDeadlineExceeded ||
              got[1].code() == absl::StatusCode::kDeadlineExceeded)
      << got[0] << " / " << got[1];
  // The backend is aborted: later operations fail at once.
  float x = 1;
  EXPECT_FALSE(group[0]->AllReduce(&x, 1)->Wait(absl::Seconds(5)).ok());
}

TEST_P(CollectiveBehaviour, AWaitThatTimesOutAbortsTheBackend) {
  auto group = MustGroup(GetParam(), 2);
  ASSERT_EQ(group.size(), 2u);
  float x = 1;
  WorkPtr w = group[0]->AllReduce(&x, 1);  // rank 1 never joins
  absl::Status s = w->Wait(absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_FALSE(group[0]->Barrier()->Wait(absl::Seconds(5)).ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectiveBehaviour, kAllBackends,
                         [](const auto& p) { return BackendName(p.param); });

TEST(RingTest, APeerThatDiesFailsItsNeighboursAtOnce) {
  auto group = MustGroup(Backend::kRing, 3);
  ASSERT_EQ(group.size(), 3u);
  group[1].reset();  // closes its connections, as a killed process's kernel does
  // Rank 0 only sends to rank 1 and rank 2 only receives from it: both notice.
  std::vector<absl::Status> got(3);
  OnEveryRank(3, [&](int r) {
    if (r == 1) return;
    std::vector<float> data(1000, 1.0f);
    got[r] = group[r]->AllReduce(data.data(), 1000)->Wait(absl::Seconds(30));
  });
  // Each names the connection that failed first (rank 1's, or a neighbour's that gave up).
  for (int r : {0, 2}) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kUnavailable) << got[r];
    EXPECT_NE(got[r].message().find("the peer is gone"), std::string::npos) << got[r];
  }
}

TEST(RingTest, ARankWithAnotherTokenIsRefused) {
  GroupOptions o;
  o.tokens = {"secret", "secret", "guess"};
  o.connect_timeout = absl::Seconds(2);
  auto group = MakeGroup(Backend::kRing, 3, o);
  // Rank 2 dials rank 0, which refuses it; rank 0 then never gets its previous rank.
  EXPECT_EQ(group[2].status().code(), absl::StatusCode::kPermissionDenied) << group[2].status();
  EXPECT_EQ(group[0].status().code(), absl::StatusCode::kDeadlineExceeded) << group[0].status();
  EXPECT_NE(group[0].status().message().find("wrong job token"), std::string::npos)
      << group[0].status();
}

TEST(RingTest, NobodyListeningFailsTheSetupWithinItsTimeout) {
  auto l = RingListener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto unused = RingListener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(unused.ok());
  const std::string dead = "127.0.0.1:" + std::to_string((*unused)->port());
  unused->reset();  // nobody listens there now
  RingOptions ro;
  ro.rank = 0;
  ro.addresses = {"127.0.0.1:" + std::to_string((*l)->port()), dead};
  ro.listener = std::move(*l);
  ro.token = "t";
  ro.connect_timeout = absl::Milliseconds(500);
  auto ring = ConnectRing(std::move(ro));
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kDeadlineExceeded) << ring.status();
  EXPECT_NE(ring.status().message().find(dead), std::string::npos) << ring.status();
}

TEST(RingTest, OneRankNeedsNoPeers) {
  auto l = RingListener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  RingOptions ro;
  ro.addresses = {"127.0.0.1:" + std::to_string((*l)->port())};
  ro.listener = std::move(*l);
  auto ring = ConnectRing(std::move(ro));
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::vector<float> x = {1, 2, 3}, all(3);
  EXPECT_TRUE((*ring)->AllReduce(x.data(), 3)->Wait().ok());
  EXPECT_TRUE((*ring)->AllGather(x.data(), 3, all.data())->Wait().ok());
  EXPECT_EQ(all, x);
}

TEST(RingTest, AddressesAreSplitAndBadOnesNamed) {
  auto hp = SplitHostPort("t-worker-0.ns.svc:2222");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->first, "t-worker-0.ns.svc");
  EXPECT_EQ(hp->second, 2222);
  EXPECT_EQ(SplitHostPort("[::1]:80")->first, "::1");
  for (const char* bad : {"host", ":80", "host:", "host:99999", "host:8x"}) {
    EXPECT_FALSE(SplitHostPort(bad).ok()) << bad;
  }
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "abcd"));
  EXPECT_FALSE(TokensEqual("", "a"));
}

}  // namespace
}  // namespace lockstep::trainer::comm
