#pragma once
// The TCP backend ("ring"): ranks in separate processes joined by authenticated TCP links
// (peer_link.h), running collective schedules (schedule.h) over them (exchange.h).
//
// All-reduce picks its algorithm by size from the registry in schedule.h: recursive
// halving-doubling for buffers up to `halving_doubling_max_bytes` on a power-of-two rank
// count (1/64 of it otherwise; log2(n) steps, where latency dominates), the ring above (a
// reduce-scatter and an all-gather, each rank sending and receiving 2(n-1)/n of the buffer whatever
// n is, in pipelined units of `unit_bytes`). Broadcast is a pipelined chain from the root,
// all-gather and reduce-scatter ring steps, barrier a one-element all-reduce.
//
// Setup: every rank binds a RingListener first (so its address can be published before anyone
// connects), then ConnectRing connects it with every peer any algorithm needs; each
// connection presents the job token, and a peer without it is refused.
//
// Failure: a closed or reset connection fails the operation at once (Unavailable naming the
// peer); no byte moving for `timeout` fails it with DeadlineExceeded; either aborts the
// backend. A peer that finished an operation and left does not fail ranks still finishing it.
// Thread-safety: as Collective.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/collective.h"
#include "trainer/comm/peer_link.h"
#include "trainer/comm/schedule.h"

namespace lockstep::trainer::comm {

using RingListener = LinkListener;

struct RingOptions {
  int rank = 0;
  std::vector<std::string> addresses;  // "host:port" of every rank's listener, by rank
  std::unique_ptr<RingListener> listener;
  std::string token;  // the job token every connection must present
  absl::Duration connect_timeout = absl::Minutes(2);
  absl::Duration timeout = absl::Minutes(5);  // an operation with no byte moving this long fails
  int64_t unit_bytes = 512 << 10;             // pipelining unit
  // All-reduces up to this size use halving-doubling, larger ones the ring (see above).
  int64_t halving_doubling_max_bytes = 1 << 20;
  std::optional<Algorithm> all_reduce;  // forces one algorithm for every size
};

absl::StatusOr<std::unique_ptr<Collective>> ConnectRing(RingOptions options);

}  // namespace lockstep::trainer::comm
