#pragma once
// Decoding across threads: [0, n) cut into one contiguous range per thread, each run by `body`;
// the error returned is the failing range's that starts first, so a bad input is reported the
// same way however many threads decode.
// Thread-safety: `body` runs on several threads at once, on disjoint ranges.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace lockstep::trainer {

// The threads that decode data: the machine's, up to 8 (loading happens before training, so
// the training threads are idle).
inline int DecodeThreads() {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 8));
}

inline absl::Status ParallelFor(int64_t n, int threads,
                                const std::function<absl::Status(int64_t, int64_t)>& body) {
  const int64_t t = std::max<int64_t>(1, std::min<int64_t>(threads, n));
  if (t <= 1) return n > 0 ? body(0, n) : absl::OkStatus();
  std::vector<absl::Status> status(static_cast<size_t>(t));
  std::vector<std::thread> pool;
  for (int64_t k = 0; k < t; ++k) {
    pool.emplace_back(
        [&, k] { status[static_cast<size_t>(k)] = body(n * k / t, n * (k + 1) / t); });
  }
  for (std::thread& th : pool) th.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace lockstep::trainer
