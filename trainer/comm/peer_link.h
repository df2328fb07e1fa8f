#pragma once
// Peer links: authenticated TCP connections between the ranks of a job (the transport half of
// the TCP backend; what travels on them is decided by a schedule, see schedule.h, and moved by
// exchange.h). A pair of ranks that exchange data holds two connections, and large transfers
// take one per direction, as NCCL's socket transport does: one connection carrying both
// directions at once moved about 20% less on loopback than two (bench/allreduce_bench.cc's
// ceiling, 2 ranks, 64 MiB).
//
// Setup: every rank binds a LinkListener first (so its address can be published before anyone
// connects), then ConnectPeers dials some of its peers and accepts the others: of a pair, the
// rank the other is at most half-way round the ring from dials (the lower rank when exactly
// half-way), so on a ring each rank dials its next rank and accepts its previous one. The
// dialer opens both of the pair's connections. Every connection opens with a handshake
// carrying the job token, the dialer's rank, the group size and which of the pair's two
// connections it is; the acceptor answers yes or no and drops connections with a wrong token,
// so only members of the job get a link.
//
// Errors: a peer that cannot be reached within the connect timeout is DeadlineExceeded
// (naming its address and the last error); a peer that refuses this rank is PermissionDenied.
// Thread-safety: ConnectPeers blocks the calling thread; a PeerLink is used by one Exchanger.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep::trainer::comm {

class LinkListener {
 public:
  // Binds host:port (port 0: the kernel picks one) and listens.
  static absl::StatusOr<std::unique_ptr<LinkListener>> Bind(const std::string& host, int port);
  ~LinkListener();
  LinkListener(const LinkListener&) = delete;
  LinkListener& operator=(const LinkListener&) = delete;
  int port() const;
  int fd() const { return fd_; }

 private:
  explicit LinkListener(int fd) : fd_(fd) {}
  int fd_;
};

// The two connected, authenticated sockets to one peer rank (both closed on destruction). A
// unit of kSplitBytes or more goes on the connection of its direction: the pair's first
// connection carries the dialer's, the second the acceptor's. Smaller units take the first
// connection both ways: on one connection each direction's data carries the other's
// acknowledgements (split too, 4-16 KiB all-reduces on 2 ranks took 66 us against 48 at 4 KiB
// and 64 against 32 at 16 KiB, medians of six).
class PeerLink {
 public:
  static constexpr size_t kSplitBytes = 128 << 10;
  // first_fd/second_fd: the pair's first and second connection; `dialed`: this rank dialed.
  PeerLink(int peer, std::string address, int first_fd, int second_fd, bool dialed)
      : peer_(peer),
        address_(std::move(address)),
        first_fd_(first_fd),
        second_fd_(second_fd),
        dialed_(dialed) {}
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;
  int peer() const { return peer_; }
  const std::string& address() const { return address_; }
  // The socket a unit of `bytes` is sent or received on.
  int SendFd(size_t bytes) const { return bytes < kSplitBytes || dialed_ ? first_fd_ : second_fd_; }
  int RecvFd(size_t bytes) const {
    return bytes < kSplitBytes || !dialed_ ? first_fd_ : second_fd_;
  }
  bool Owns(int fd) const { return fd == first_fd_ || fd == second_fd_; }
  // Stops both connections: blocked and later calls on them fail, and the peer sees them end.
  // Safe from any thread.
  void Shutdown();

 private:
  const int peer_;
  const std::string address_;
  const int first_fd_;
  const int second_fd_;
  const bool dialed_;
};

struct LinkOptions {
  int rank = 0;
  std::vector<std::string> addresses;  // "host:port" of every rank's listener, by rank
  std::string token;                   // the job token every connection must present
  absl::Duration connect_timeout = absl::Minutes(2);
};

// Connects this rank with every rank in `peers`. Returns one link per rank, indexed by rank
// (null for ranks not in `peers`).
absl::StatusOr<std::vector<std::unique_ptr<PeerLink>>> ConnectPeers(LinkListener& listener,
                                                                    const LinkOptions& options,
                                                                    const std::vector<int>& peers);

// Whether `rank` dials `peer` (the other accepts).
bool Dials(int n, int rank, int peer);

// Splits "host:port"; InvalidArgument names the address.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address);

// Compares without an early exit, so the time taken does not tell how much of a token matched.
bool TokensEqual(const std::string& a, const std::string& b);

}  // namespace lockstep::trainer::comm
