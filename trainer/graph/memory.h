#pragma once
// What the machine can give a model: the memory available now (Linux's MemAvailable, which
// counts reclaimable caches), and the error a weight too large for it raises while a graph is
// built, before the weight is allocated (an allocation the kernel would grant and then kill
// the process for touching, or refuse with std::bad_alloc, is reported as this instead).
// Thread-safety: pure functions.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace lockstep::trainer::graph {

// Bytes available for new allocations: MemAvailable of /proc/meminfo, lowered to the cgroup's
// memory.max less what the container uses besides its page cache (memory.current less
// memory.stat's file) when a container limit is tighter; -1 when unknown. `root` prefixes the
// paths (a test's fake /proc and /sys).
int64_t AvailableMemoryBytes(const std::string& root = "");
// "21.3 GB".
std::string Bytes(double bytes);

// Thrown by Initialize for a weight (with its gradient) larger than AvailableMemoryBytes();
// Graph::Call turns it into the layer's InvalidArgument.
class WeightTooLarge : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace lockstep::trainer::graph
