#pragma once
// Peer links: authenticated TCP connections between the ranks of a job, one per pair of ranks
// that exchange data, used in both directions (the transport half of the TCP backend; what
// travels on them is decided by a schedule, see schedule.h, and moved by exchange.h).
//
// Setup: every rank binds a LinkListener first (so its address can be published before anyone
// connects), then ConnectPeers dials some of its peers and accepts the others: of a pair, the
// rank the other is at most half-way round the ring from dials (the lower rank when exactly
// half-way), so on a ring each rank dials its next rank and accepts its previous one. Every
// connection opens with a handshake carrying the job token, the dialer's rank and the group
// size; the acceptor answers yes or no and drops connections with a wrong token, so only
// members of the job get a link.
//
// Errors: a peer that cannot be reached within the connect timeout is DeadlineExceeded
// (naming its address and the last error); a peer that refuses this rank is PermissionDenied.
// Thread-safety: ConnectPeers blocks the calling thread; a PeerLink is used by one Exchanger.

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

// One connected, authenticated socket to one peer rank (closed on destruction).
class PeerLink {
 public:
  PeerLink(int peer, std::string address, int fd) : peer_(peer), address_(address), fd_(fd) {}
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;
  int peer() const { return peer_; }
  const std::string& address() const { return address_; }
  int fd() const { return fd_; }
  // Stops both directions: blocked and later calls on the socket fail, and the peer sees the
  // connection end. Safe from any thread.
  void Shutdown();

 private:
  const int peer_;
  const std::string address_;
  const int fd_;
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
