// The schedules of every algorithm, run together for n ranks by a simulator with no sockets:
// each element carries the set of ranks whose contribution it holds and the id of the
// reduction that produced it. The simulator delivers messages between ranks in a random order
// (several seeds), and checks: no cyclic wait (every rank finishes), message sizes match,
// every contribution is added exactly once, every rank ends with the whole result, the result
// of each element was computed once and copied (so identical bits everywhere), and no rank
// overwrites a range while a send of it may still be reading it.
#include "trainer/comm/schedule.h"

#include <cstdint>
#include <deque>
#include <map>
#include <random>

#include "gtest/gtest.h"
#include "trainer/comm/collective.h"

namespace lockstep::trainer::comm {
namespace {

struct Elem {
  uint32_t mask = 0;  // contributions held
  int64_t id = 0;     // which reduction computed this value (0: a rank's own input)
  bool operator==(const Elem&) const = default;
};

struct Message {
  int from;
  int64_t begin;
  std::vector<Elem> payload;  // the range as it was when the send started
};

// Runs every rank's schedule to the end; buffers[r] is rank r's buffer, updated in place.
// Returns an empty string, or what went wrong.
std::string Simulate(const std::vector<Schedule>& schedules,
                     std::vector<std::vector<Elem>>* buffers, uint32_t seed) {
  const int n = static_cast<int>(schedules.size());
  std::map<std::pair<int, int>, std::deque<Message>> wire;  // (from, to) -> messages in order
  std::vector<size_t> sent(n, 0), received(n, 0);
  std::mt19937 rng(seed);
  int64_t next_id = 1;
  for (;;) {
    // Every step that can go now, taken in a random order.
    std::vector<std::pair<int, bool>> ready;  // (rank, is_send)
    for (int r = 0; r < n; ++r) {
      const Schedule& s = schedules[r];
      if (sent[r] < s.sends.size() &&
          s.sends[sent[r]].after_recvs <= static_cast<int64_t>(received[r])) {
        ready.emplace_back(r, true);
      }
      if (received[r] < s.recvs.size() && !wire[{s.recvs[received[r]].peer, r}].empty()) {
        ready.emplace_back(r, false);
      }
    }
    if (ready.empty()) break;
    auto [r, is_send] = ready[rng() % ready.size()];
    std::vector<Elem>& buf = (*buffers)[r];
    if (is_send) {
      const SendStep& u = schedules[r].sends[sent[r]++];
      if (u.peer == r || u.peer < 0 || u.peer >= n) return "a send to a bad peer";
      wire[{r, u.peer}].push_back(
          {r, u.begin, std::vector<Elem>(buf.begin() + u.begin, buf.begin() + u.begin + u.count)});
      continue;
    }
    const RecvStep& u = schedules[r].recvs[received[r]++];
    Message m = std::move(wire[{u.peer, r}].front());
    wire[{u.peer, r}].pop_front();
    if (static_cast<int64_t>(m.payload.size()) != u.count) {
      return "rank " + std::to_string(r) + " received a message of another size";
    }
    // The sender's kernel may copy its bytes as late as this: the range must be unchanged.
    const std::vector<Elem>& src = (*buffers)[m.from];
    if (!std::equal(m.payload.begin(), m.payload.end(), src.begin() + m.begin)) {
      return "rank " + std::to_string(m.from) + " overwrote a range before its send finished";
    }
    for (int64_t i = 0; i < u.count; ++i) {
      Elem& e = buf[u.begin + i];
      if (!u.reduce) {
        e = m.payload[i];
        continue;
      }
      if ((e.mask & m.payload[i].mask) != 0) {
        return "rank " + std::to_string(r) + " added a contribution twice at element " +
               std::to_string(u.begin + i);
      }
      e = {e.mask | m.payload[i].mask, next_id++};
    }
  }
  for (int r = 0; r < n; ++r) {
    if (sent[r] != schedules[r].sends.size() || received[r] != schedules[r].recvs.size()) {
      return "rank " + std::to_string(r) + " never finished (a cyclic wait)";
    }
  }
  for (auto& [key, q] : wire) {
    if (!q.empty()) return "a message was never received";
  }
  return "";
}

std::vector<std::vector<Elem>> Inputs(int n, int64_t elems) {
  std::vector<std::vector<Elem>> b(n);
  for (int r = 0; r < n; ++r) b[r].assign(elems, Elem{1u << r, 0});
  return b;
}

using AllReduceBuilder = Schedule (*)(int, int, int64_t, int64_t);

void ExpectAllReduce(AllReduceBuilder build, int n, int64_t elems, int64_t unit) {
  SCOPED_TRACE(testing::Message() << n << " ranks, " << elems << " elements, unit " << unit);
  std::vector<Schedule> s;
  for (int r = 0; r < n; ++r) s.push_back(build(n, r, elems, unit));
  for (uint32_t seed : {1u, 2u, 3u}) {
    auto buffers = Inputs(n, elems);
    ASSERT_EQ(Simulate(s, &buffers, seed), "") << n << " ranks, " << elems << " elements";
    const uint32_t full = n == 32 ? ~0u : (1u << n) - 1;
    for (int64_t i = 0; i < elems; ++i) {
      ASSERT_EQ(buffers[0][i].mask, full) << "element " << i;
      for (int r = 1; r < n; ++r) ASSERT_EQ(buffers[r][i], buffers[0][i]) << "rank " << r;
    }
  }
}

// Ranks; element counts and pipelining units vary inside (including counts below the rank
// count, where some chunks are empty).
class AllReduceSchedule : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceSchedule, RingReducesEveryContributionOnceAndEveryRankEndsWithTheResult) {
  for (int64_t elems : {1, 2, 5, 13, 64, 100}) {
    for (int64_t unit : {1, 3, 1 << 20}) ExpectAllReduce(RingAllReduce, GetParam(), elems, unit);
  }
}

TEST_P(AllReduceSchedule, HalvingDoublingDoesTooForAnyRankCount) {
  for (int64_t elems : {1, 2, 5, 13, 64, 100}) {
    for (int64_t unit : {1, 3, 1 << 20}) {
      ExpectAllReduce(HalvingDoublingAllReduce, GetParam(), elems, unit);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllReduceSchedule,
                         ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 12));

TEST(ScheduleTest, RingReduceScatterLeavesEachRankItsReducedChunk) {
  for (int n : {2, 3, 5}) {
    for (int64_t elems : {1, 7, 40}) {
      std::vector<Schedule> s;
      for (int r = 0; r < n; ++r) s.push_back(RingReduceScatter(n, r, elems, 2));
      auto buffers = Inputs(n, elems);
      ASSERT_EQ(Simulate(s, &buffers, 7), "");
      for (int r = 0; r < n; ++r) {
        const Range mine = ChunkRange(elems, n, r);
        for (int64_t i = mine.begin; i < mine.end; ++i) {
          EXPECT_EQ(buffers[r][i].mask, (1u << n) - 1) << n << " ranks, rank " << r;
        }
      }
    }
  }
}

TEST(ScheduleTest, RingAllGatherAndBroadcastCopyEverySlotEverywhere) {
  for (int n : {2, 3, 5}) {
    const int64_t per = 5;
    std::vector<Schedule> gather, bcast;
    std::vector<std::vector<Elem>> slots(n, std::vector<Elem>(n * per)), roots(n);
    for (int r = 0; r < n; ++r) {
      gather.push_back(RingAllGather(n, r, per, 2));
      bcast.push_back(RingBroadcast(n, r, 9, n - 1, 4));
      for (int64_t i = 0; i < per; ++i) slots[r][r * per + i] = {1u << r, 0};
      roots[r].assign(9, Elem{1u << r, 0});
    }
    ASSERT_EQ(Simulate(gather, &slots, 3), "");
    ASSERT_EQ(Simulate(bcast, &roots, 3), "");
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < n * per; ++i) EXPECT_EQ(slots[r][i].mask, 1u << (i / per));
      for (const Elem& e : roots[r]) EXPECT_EQ(e.mask, 1u << (n - 1));
    }
  }
}

TEST(ScheduleTest, HalvingDoublingTakesLogStepsOnPowersOfTwo) {
  // 8 ranks: 3 exchanges each way, one unit each, against the ring's 7 + 7.
  const Schedule hd = HalvingDoublingAllReduce(8, 5, 800, 1 << 20);
  EXPECT_EQ(hd.sends.size(), 6u);
  EXPECT_EQ(hd.recvs.size(), 6u);
  EXPECT_EQ(RingAllReduce(8, 5, 800, 1 << 20).sends.size(), 14u);
}

TEST(ScheduleTest, TheSimulatorCatchesABrokenSchedule) {
  // Two ranks that both wait for the other before sending.
  Schedule wait_first;
  wait_first.sends.push_back({0, 0, 1, 1});
  wait_first.recvs.push_back({0, 0, 1, true});
  std::vector<Schedule> s = {wait_first, wait_first};
  s[0].sends[0].peer = 1;
  s[0].recvs[0].peer = 1;
  auto buffers = Inputs(2, 1);
  EXPECT_NE(Simulate(s, &buffers, 1).find("cyclic wait"), std::string::npos);
  // A rank that adds the same contribution twice.
  Schedule twice = RingAllReduce(2, 0, 2, 1);
  twice.recvs[1].reduce = true;
  buffers = Inputs(2, 2);
  EXPECT_NE(Simulate({twice, RingAllReduce(2, 1, 2, 1)}, &buffers, 1), "");
}

TEST(ScheduleTest, TheRegistryPicksHalvingDoublingForSmallBuffersAndTheRingForLargeOnes) {
  const int64_t max = 1 << 20;
  EXPECT_EQ(ChooseAllReduce(4, 1 << 20, max, std::nullopt).id, Algorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllReduce(4, 4 << 20, max, std::nullopt).id, Algorithm::kRing);
  // Off a power of two only tiny buffers: the fold-in costs a whole extra buffer.
  EXPECT_EQ(ChooseAllReduce(3, 16 << 10, max, std::nullopt).id, Algorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseAllReduce(3, 64 << 10, max, std::nullopt).id, Algorithm::kRing);
  EXPECT_EQ(ChooseAllReduce(4, 4 << 10, max, Algorithm::kRing).id, Algorithm::kRing);
  EXPECT_EQ(ParseAlgorithm("halving-doubling"), Algorithm::kHalvingDoubling);
  EXPECT_EQ(ParseAlgorithm("ring"), Algorithm::kRing);
  EXPECT_EQ(ParseAlgorithm("tree"), std::nullopt);
  // 5 ranks: rank 0 folds into rank 1; rank 1 also meets its halving partners and the ring.
  EXPECT_EQ(AllPeers(5, 0), (std::vector<int>{1, 4}));
  EXPECT_EQ(AllPeers(5, 1), (std::vector<int>{0, 2, 3}));
}

}  // namespace
}  // namespace lockstep::trainer::comm
