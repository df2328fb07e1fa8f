// Recursive halving-doubling all-reduce (Thakur, Rabenseifner and Gropp 2005), with the
// non-power-of-two ranks folded in; see schedule.h.
#include <vector>

#include "trainer/comm/collective.h"
#include "trainer/comm/schedule.h"

namespace lockstep::trainer::comm {

namespace {

// Appends [region) as units of at most `unit_elems`, all sends after `after` receives.
void AddSends(int peer, Range region, int64_t unit_elems, int64_t after, Schedule* s) {
  if (region.size() == 0) return;
  const int units = static_cast<int>((region.size() + unit_elems - 1) / unit_elems);
  for (int k = 0; k < units; ++k) {
    const Range u = ChunkRange(region.size(), units, k);
    s->sends.push_back({peer, region.begin + u.begin, u.size(), after});
  }
}

void AddRecvs(int peer, Range region, int64_t unit_elems, bool reduce, Schedule* s) {
  if (region.size() == 0) return;
  const int units = static_cast<int>((region.size() + unit_elems - 1) / unit_elems);
  for (int k = 0; k < units; ++k) {
    const Range u = ChunkRange(region.size(), units, k);
    s->recvs.push_back({peer, region.begin + u.begin, u.size(), reduce});
  }
}

int64_t Done(const Schedule& s) { return static_cast<int64_t>(s.recvs.size()); }

}  // namespace

Schedule HalvingDoublingAllReduce(int n, int rank, int64_t elems, int64_t unit_elems) {
  Schedule s;
  if (n == 1 || elems == 0) return s;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  const Range all{0, elems};

  // Fold-in: even ranks below 2 * extra give their buffer to the odd rank above and wait.
  if (rank < 2 * extra && rank % 2 == 0) {
    AddSends(rank + 1, all, unit_elems, 0, &s);
    AddRecvs(rank + 1, all, unit_elems, false, &s);
    return s;
  }
  if (rank < 2 * extra) AddRecvs(rank - 1, all, unit_elems, true, &s);
  const int v = rank < 2 * extra ? rank / 2 : rank - extra;  // rank among the p
  auto real = [&](int w) { return w < extra ? 2 * w + 1 : w + extra; };

  // Recursive halving: at each step keep one half of the region, send the other to the
  // partner (which keeps it) and add the partner's copy of the kept half into it. Partners
  // share the region, so they cut it at the same place.
  std::vector<Range> kept, sent;
  Range region = all;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner = real(v ^ mask);
    const int64_t mid = region.begin + region.size() / 2;
    const Range lower{region.begin, mid}, upper{mid, region.end};
    const bool keep_lower = (v & mask) == 0;
    const Range keep = keep_lower ? lower : upper, give = keep_lower ? upper : lower;
    AddSends(partner, give, unit_elems, Done(s), &s);
    AddRecvs(partner, keep, unit_elems, true, &s);
    kept.push_back(keep);
    sent.push_back(give);
    region = keep;
  }
  // Recursive doubling: the reduced regions grow back, in reverse, by exchanging copies.
  int step = static_cast<int>(kept.size()) - 1;
  for (int mask = 1; mask < p; mask *= 2, --step) {
    const int partner = real(v ^ mask);
    AddSends(partner, kept[step], unit_elems, Done(s), &s);
    AddRecvs(partner, sent[step], unit_elems, false, &s);
  }
  if (rank < 2 * extra) AddSends(rank - 1, all, unit_elems, Done(s), &s);
  return s;
}

}  // namespace lockstep::trainer::comm
