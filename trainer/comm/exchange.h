#pragma once
// The byte pump of the TCP backend: moves one operation's send and receive units over a
// rank's peer links (peer_link.h), as a schedule (schedule.h) lays them out.
//
// Receives complete in order and a receive with `reduce_into` adds its floats there; a send
// goes once `after_recvs` receives are done. Large operations send on a thread of their own
// while the calling thread receives and reduces, so sending, receiving and reducing overlap
// (as the two directions of a TCP connection and the CPU allow); small ones run on the
// calling thread alone, where a hand-over between threads would cost more than it saves.
//
// Failure: a link that ends (closed, reset) while this rank still has bytes to send on it or
// to receive from it fails the operation at once (Unavailable naming the peer; "the peer is
// gone"). A link that ends after its part of the operation is done does not: a peer that has
// everything it needs may finish and leave first. No byte moving for `timeout` fails it with
// DeadlineExceeded. After a failure, or Interrupt, every link is shut down (so the peers fail
// too) and the Exchanger is unusable.
//
// Thread-safety: Run from one thread at a time; Interrupt from any thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/comm/peer_link.h"

namespace lockstep::trainer::comm {

struct SendUnit {
  int peer;
  const char* ptr;
  size_t bytes;
  int64_t after_recvs;
};

struct RecvUnit {
  int peer;
  char* ptr;  // where the bytes land (ignored when reducing)
  size_t bytes;
  float* reduce_into = nullptr;  // non-null: the floats received are added here
};

class Exchanger {
 public:
  // links[r]: the link to rank r, or null. `rank` and the addresses name peers in errors.
  Exchanger(int rank, std::vector<std::unique_ptr<PeerLink>> links, absl::Duration timeout);
  ~Exchanger();
  Exchanger(const Exchanger&) = delete;
  Exchanger& operator=(const Exchanger&) = delete;

  // Runs one operation to the end. `aborted` is polled: a non-OK status ends the operation
  // with that status.
  absl::Status Run(const std::vector<SendUnit>& sends, const std::vector<RecvUnit>& recvs,
                   const std::function<absl::Status()>& aborted);

  // Wakes a running or later Run, which then returns `aborted()`.
  void Interrupt();

  // Operations moving at least this many bytes send on the sender thread.
  static constexpr size_t kThreadedBytes = 256 << 10;

 private:
  struct Op;
  void SenderLoop();
  void Pump(Op& op, bool send, bool recv);
  void Fail(Op& op, absl::Status s);
  absl::Status Lost(int peer, bool sending, const std::string& why) const;

  const int rank_;
  std::vector<std::unique_ptr<PeerLink>> links_;
  const absl::Duration timeout_;
  const int wake_fd_;  // an eventfd, readable once interrupted
  const int done_fd_;  // an eventfd the sender thread signals at the end of its part
  std::vector<float> scratch_;
  std::atomic<bool> interrupted_{false};
  std::atomic<uint32_t> signal_{0};  // bumped by each receive and failure, for a waiting sender

  std::mutex mu_;
  std::condition_variable cv_;
  Op* job_ = nullptr;  // the sender thread's current operation
  bool stopping_ = false;
  std::thread sender_;
};

}  // namespace lockstep::trainer::comm
