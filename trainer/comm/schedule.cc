#include "trainer/comm/schedule.h"

#include <algorithm>
#include <functional>

#include "trainer/comm/collective.h"

namespace lockstep::trainer::comm {

namespace {

int Mod(int x, int n) { return ((x % n) + n) % n; }

int Units(int64_t max_chunk, int64_t unit_elems) {
  return static_cast<int>(std::max<int64_t>(1, (max_chunk + unit_elems - 1) / unit_elems));
}

// A series of ring steps over chunks of a buffer. At step t this rank sends chunk
// send_chunk(t) to the next rank and receives chunk recv_chunk(t) from the previous one. Unit
// k of step t's send forwards unit k of step t-1's receive (for t = 0 too when
// `first_depends`: the series continues the one before it).
void RingSteps(int n, int rank, const std::function<Range(int)>& chunk, int steps,
               const std::function<int(int)>& send_chunk, const std::function<int(int)>& recv_chunk,
               bool reduce, bool first_depends, int64_t unit_elems, Schedule* s) {
  int64_t max_chunk = 0;
  for (int c = 0; c < n; ++c) max_chunk = std::max(max_chunk, chunk(c).size());
  const int units = Units(max_chunk, unit_elems);
  const int64_t base = static_cast<int64_t>(s->recvs.size());
  const int next = Mod(rank + 1, n), prev = Mod(rank - 1, n);
  for (int t = 0; t < steps; ++t) {
    const Range sc = chunk(send_chunk(t));
    const Range rc = chunk(recv_chunk(t));
    for (int k = 0; k < units; ++k) {
      const Range su = ChunkRange(sc.size(), units, k);
      const Range ru = ChunkRange(rc.size(), units, k);
      int64_t after = 0;
      if (t > 0) {
        after = base + (t - 1) * units + k + 1;
      } else if (first_depends) {
        after = base - units + k + 1;
      }
      s->sends.push_back({next, sc.begin + su.begin, su.size(), after});
      s->recvs.push_back({prev, rc.begin + ru.begin, ru.size(), reduce});
    }
  }
}

std::vector<int> RingPeers(int n, int rank) {
  if (n == 1) return {};
  std::vector<int> p = {Mod(rank + 1, n), Mod(rank - 1, n)};
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

std::vector<int> HalvingDoublingPeers(int n, int rank) {
  // Every peer a schedule of n elements (no empty step) talks to.
  Schedule s = HalvingDoublingAllReduce(n, rank, std::max(n, 1) * int64_t{4}, 1 << 30);
  std::vector<int> p;
  for (const SendStep& u : s.sends) p.push_back(u.peer);
  for (const RecvStep& u : s.recvs) p.push_back(u.peer);
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

}  // namespace

Schedule RingReduceScatter(int n, int rank, int64_t elems, int64_t unit_elems) {
  Schedule s;
  if (n == 1 || elems == 0) return s;
  RingSteps(
      n, rank, [&](int c) { return ChunkRange(elems, n, c); }, n - 1,
      [&](int t) { return Mod(rank - t - 1, n); }, [&](int t) { return Mod(rank - t - 2, n); },
      true, false, unit_elems, &s);
  return s;
}

Schedule RingAllReduce(int n, int rank, int64_t elems, int64_t unit_elems) {
  Schedule s = RingReduceScatter(n, rank, elems, unit_elems);
  if (n == 1 || elems == 0) return s;
  // All-gather: the fully reduced chunk `rank` travels around the ring.
  RingSteps(
      n, rank, [&](int c) { return ChunkRange(elems, n, c); }, n - 1,
      [&](int t) { return Mod(rank - t, n); }, [&](int t) { return Mod(rank - t - 1, n); }, false,
      true, unit_elems, &s);
  return s;
}

Schedule RingAllGather(int n, int rank, int64_t per_rank, int64_t unit_elems) {
  Schedule s;
  if (n == 1 || per_rank == 0) return s;
  RingSteps(
      n, rank,
      [&](int c) {
        return Range{c * per_rank, (c + 1) * per_rank};
      },
      n - 1, [&](int t) { return Mod(rank - t, n); }, [&](int t) { return Mod(rank - t - 1, n); },
      false, false, unit_elems, &s);
  return s;
}

Schedule RingBroadcast(int n, int rank, int64_t elems, int root, int64_t unit_elems) {
  Schedule s;
  if (n == 1 || elems == 0) return s;
  const int units = Units(elems, unit_elems);
  const bool last = Mod(rank + 1, n) == root;
  for (int k = 0; k < units; ++k) {
    const Range u = ChunkRange(elems, units, k);
    if (rank != root) s.recvs.push_back({Mod(rank - 1, n), u.begin, u.size(), false});
    if (!last) s.sends.push_back({Mod(rank + 1, n), u.begin, u.size(), rank == root ? 0 : k + 1});
  }
  return s;
}

const std::vector<AlgorithmEntry>& AllReduceAlgorithms() {
  // Halving-doubling first: it takes the small buffers, where its log2(n) steps beat the
  // ring's 2(n-1); the ring takes the rest, where only bandwidth counts. On a power of two it
  // moves the same bytes as the ring, so it keeps the buffers up to `small_max`; otherwise
  // the folded-in ranks send their whole buffer twice, and it keeps only the tiny ones
  // (measured on loopback, 3 ranks: ahead at 16 KiB, behind from 64 KiB).
  static const std::vector<AlgorithmEntry> kAlgorithms = {
      {Algorithm::kHalvingDoubling, "halving-doubling", HalvingDoublingPeers,
       HalvingDoublingAllReduce,
       [](int n, int64_t bytes, int64_t small_max) {
         const bool power_of_two = (n & (n - 1)) == 0;
         return bytes <= (power_of_two ? small_max : small_max / 64);
       }},
      {Algorithm::kRing, "ring", RingPeers, RingAllReduce,
       [](int, int64_t, int64_t) { return true; }},
  };
  return kAlgorithms;
}

const AlgorithmEntry& AlgorithmFor(Algorithm id) {
  for (const AlgorithmEntry& e : AllReduceAlgorithms()) {
    if (e.id == id) return e;
  }
  return AllReduceAlgorithms().back();
}

const AlgorithmEntry& ChooseAllReduce(int n, int64_t bytes, int64_t small_max_bytes,
                                      std::optional<Algorithm> forced) {
  if (forced.has_value()) return AlgorithmFor(*forced);
  for (const AlgorithmEntry& e : AllReduceAlgorithms()) {
    if (e.fits(n, bytes, small_max_bytes)) return e;
  }
  return AllReduceAlgorithms().back();
}

std::vector<int> AllPeers(int n, int rank) {
  std::vector<int> all;
  for (const AlgorithmEntry& e : AllReduceAlgorithms()) {
    for (int p : e.peers(n, rank)) all.push_back(p);
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  std::erase(all, rank);
  return all;
}

std::optional<Algorithm> ParseAlgorithm(const std::string& name) {
  for (const AlgorithmEntry& e : AllReduceAlgorithms()) {
    if (name == e.name) return e.id;
  }
  return std::nullopt;
}

}  // namespace lockstep::trainer::comm
