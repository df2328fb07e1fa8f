#pragma once
// Collective schedules: what one rank sends, receives and reduces in one operation, as plain
// data, with no sockets. A backend runs a schedule over its peer links (see peer_link.h); the
// algorithm lives here alone, so a new collective algorithm is a new builder plus an entry in
// the registry at the bottom of this file.
//
// A schedule is two ordered lists over one float buffer: the sends and the receives of this
// rank. Receives complete in list order; a send goes once `after_recvs` receives are done (it
// forwards what they brought). A receive with `reduce` adds the incoming floats into its
// range, otherwise it overwrites it. Each rank's k-th send to peer q is matched with q's k-th
// receive from this rank, and they have the same element count.
//
// Cross-rank contract (checked for every builder by schedule_test.cc, without sockets): run
// together, the schedules of ranks 0..n-1 finish (no cyclic wait), every contribution is
// added exactly once into every element's result, every rank ends with the whole result (the
// reduce-scatter: its own chunk), and the result of every element is computed by one rank and
// copied to the others, so it is identical bit for bit everywhere.
//
// Thread-safety: pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::trainer::comm {

struct SendStep {
  int peer = 0;
  int64_t begin = 0;  // element offset into the buffer
  int64_t count = 0;
  int64_t after_recvs = 0;  // receives that must be done before this send goes
};

struct RecvStep {
  int peer = 0;
  int64_t begin = 0;
  int64_t count = 0;
  bool reduce = false;  // add into [begin, begin + count) instead of overwriting it
};

struct Schedule {
  std::vector<SendStep> sends;
  std::vector<RecvStep> recvs;
};

// The ring (rank r sends to r+1 and receives from r-1). All-reduce is a reduce-scatter and an
// all-gather, 2(n-1) steps each moving 1/n of the buffer in units of at most `unit_elems`;
// unit k of a step forwards unit k of the previous step, so units pipeline along the ring.
Schedule RingAllReduce(int n, int rank, int64_t elems, int64_t unit_elems);
// The reduce-scatter half: rank r ends holding the sum of ChunkRange(elems, n, r).
Schedule RingReduceScatter(int n, int rank, int64_t elems, int64_t unit_elems);
// All-gather over a buffer of n * per_rank elements whose slot `rank` is filled.
Schedule RingAllGather(int n, int rank, int64_t per_rank, int64_t unit_elems);
// A pipelined chain from `root` along the ring.
Schedule RingBroadcast(int n, int rank, int64_t elems, int root, int64_t unit_elems);

// Recursive halving (reduce-scatter) then recursive doubling (all-gather) among the largest
// power of two p <= n ranks: log2(p) steps each way instead of n-1, so it wins where latency
// dominates (small buffers). A rank count that is not a power of two is folded in: among the
// first 2(n-p) ranks each even rank hands its whole buffer to the odd rank above it, which
// takes part for both, and gets the result back from it at the end.
Schedule HalvingDoublingAllReduce(int n, int rank, int64_t elems, int64_t unit_elems);

// The all-reduce algorithms, and which peers each needs a link to.
enum class Algorithm { kRing, kHalvingDoubling };

struct AlgorithmEntry {
  Algorithm id;
  const char* name;
  // The ranks this rank exchanges data with (for setting up links once, at connect time).
  std::vector<int> (*peers)(int n, int rank);
  Schedule (*all_reduce)(int n, int rank, int64_t elems, int64_t unit_elems);
  // Whether the automatic choice takes it for a buffer of `bytes` among n ranks (the first
  // that fits wins); `small_max_bytes` is the backend's option for small-message algorithms.
  bool (*fits)(int n, int64_t bytes, int64_t small_max_bytes);
};

// The registry, in order of preference.
const std::vector<AlgorithmEntry>& AllReduceAlgorithms();
const AlgorithmEntry& AlgorithmFor(Algorithm id);
// `forced` when set, else the first entry that fits.
const AlgorithmEntry& ChooseAllReduce(int n, int64_t bytes, int64_t small_max_bytes,
                                      std::optional<Algorithm> forced);
// The union of every registered algorithm's peers, sorted, without `rank`.
std::vector<int> AllPeers(int n, int rank);
// "ring" / "halving-doubling" <-> Algorithm (for command lines).
std::optional<Algorithm> ParseAlgorithm(const std::string& name);

}  // namespace lockstep::trainer::comm
