#pragma once
// The ring backend: ranks in separate processes joined in a ring of TCP connections (rank r
// sends to r+1 and receives from r-1), on Boost.Asio.
//
// All-reduce is a reduce-scatter followed by an all-gather (2(n-1) steps, each moving 1/n of
// the data), so every rank sends and receives 2(n-1)/n of the buffer whatever n is. Each
// chunk is cut into pipelining units (`unit_bytes`), and a unit is forwarded as soon as it has
// been received and reduced, so sending, receiving and reducing overlap. Broadcast is a
// pipelined chain from the root, all-gather n-1 forwarding steps, barrier a one-element
// all-reduce.
//
// Setup: every rank binds a RingListener first (so its address can be published before anyone
// connects), then ConnectRing dials the next rank and accepts the previous one. Each
// connection opens with a handshake carrying the job token, the ranks and the group size; the
// acceptor answers yes or no and drops connections with a wrong token, so only members of the
// job join its ring.
//
// Failure: a closed or reset connection fails the operation at once (Unavailable naming the
// peer); no byte moving for `timeout` fails it with DeadlineExceeded; either aborts the ring.
// Thread-safety: as Collective.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/collective.h"

namespace lockstep::trainer::comm {

class RingListener;

struct RingOptions {
  int rank = 0;
  std::vector<std::string> addresses;  // "host:port" of every rank's listener, by rank
  std::unique_ptr<RingListener> listener;
  std::string token;  // the job token every connection must present
  absl::Duration connect_timeout = absl::Minutes(2);
  absl::Duration timeout = absl::Minutes(5);  // an operation with no byte moving this long fails
  int64_t unit_bytes = 512 << 10;             // pipelining unit
};

class RingListener {
 public:
  // Binds host:port (port 0: the kernel picks one).
  static absl::StatusOr<std::unique_ptr<RingListener>> Bind(const std::string& host, int port);
  ~RingListener();
  int port() const;

  struct Impl;
  std::unique_ptr<Impl> TakeImpl();  // for ConnectRing

 private:
  explicit RingListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

absl::StatusOr<std::unique_ptr<Collective>> ConnectRing(RingOptions options);

// Splits "host:port"; InvalidArgument names the address.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address);

// Compares without an early exit, so the time taken does not tell how much of a token matched.
bool TokensEqual(const std::string& a, const std::string& b);

}  // namespace lockstep::trainer::comm
