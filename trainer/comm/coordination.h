#pragma once
// Coordination of a multi-worker job over gRPC (trainer/proto/coordination.proto). The chief
// (else worker 0) runs the server on its TF_CONFIG address; every task, the server's own
// included, is a client:
//   Join      rendezvous of the whole group (rank, world size);
//   Barrier   named barriers;
//   Set/Get   a key-value store for bootstrap data (each rank's ring address);
//   heartbeats every interval. The server declares a rank lost when it has not heard from it
//             for the peer timeout, and says so in every heartbeat answer; a client that hears
//             it, or cannot reach the server for the peer timeout, reports PeerLost through its
//             callback (the strategy then aborts its collectives and the trainer exits with a
//             retryable code). A stop request (SIGTERM) travels the same way.
// Every call presents the job token; the server refuses others.
// Thread-safety: thread-safe.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep::trainer::comm {

class CoordinationServer {
 public:
  struct Options {
    int world_size = 1;
    std::string token;
    absl::Duration peer_timeout = absl::Seconds(30);
  };
  // Listens on host:port (port 0 picks one).
  static absl::StatusOr<std::unique_ptr<CoordinationServer>> Start(const std::string& host,
                                                                   int port, Options options);
  ~CoordinationServer();
  int port() const;

  struct Impl;

 private:
  explicit CoordinationServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class CoordinationClient {
 public:
  CoordinationClient(const std::string& address, std::string token, int rank, int world_size,
                     std::string task);
  ~CoordinationClient();

  // Waits for the server to come up and every rank to join, up to `timeout`.
  absl::Status Join(absl::Duration timeout);
  absl::Status Barrier(const std::string& name, absl::Duration timeout);
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);

  // Starts heartbeats; `on_lost` is called once, from the heartbeat thread, with an
  // Unavailable status naming the lost peer.
  void StartHeartbeats(absl::Duration interval, absl::Duration peer_timeout,
                       std::function<void(absl::Status)> on_lost);
  // The next heartbeats tell the group this task was asked to stop.
  void RequestStop() { stop_requested_ = true; }
  // Some task of the group was asked to stop.
  bool StopSeen() const { return stop_seen_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> stop_seen_{false};
  std::atomic<bool> quit_{false};
  std::thread heartbeat_;
};

}  // namespace lockstep::trainer::comm
