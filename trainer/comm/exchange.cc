#include "trainer/comm/exchange.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::comm {

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void AddInto(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void Signal(int fd) {
  const uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));
}

}  // namespace

struct Exchanger::Op {
  Op(const std::vector<SendUnit>& s, const std::vector<RecvUnit>& r,
     const std::function<absl::Status()>& a, int n)
      : sends(s), recvs(r), aborted(a), sends_left(new std::atomic<int64_t>[n]) {
    for (int p = 0; p < n; ++p) sends_left[p] = 0;
    for (const SendUnit& u : sends) ++sends_left[u.peer];
  }
  const std::vector<SendUnit>& sends;
  const std::vector<RecvUnit>& recvs;
  const std::function<absl::Status()>& aborted;
  std::unique_ptr<std::atomic<int64_t>[]> sends_left;  // by peer
  std::atomic<size_t> recvs_done{0};
  std::atomic<int64_t> last_progress{NowNs()};
  std::atomic<bool> failed{false};
  // True while the sending thread is inside send(): the bytes may have reached the peer
  // before sends_left says so.
  std::atomic<bool> in_send{false};
  size_t si = 0, soff = 0;  // the sending thread's position
  size_t ri = 0, roff = 0;  // the receiving thread's position
  std::mutex mu;
  absl::Status error;  // the first failure
};

Exchanger::Exchanger(int rank, std::vector<std::unique_ptr<PeerLink>> links, absl::Duration timeout)
    : rank_(rank),
      links_(std::move(links)),
      timeout_(timeout),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      done_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      sender_([this] { SenderLoop(); }) {}

Exchanger::~Exchanger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  sender_.join();
  ::close(wake_fd_);
  ::close(done_fd_);
}

void Exchanger::Interrupt() {
  interrupted_ = true;
  Signal(wake_fd_);
  ++signal_;
  signal_.notify_all();
}

absl::Status Exchanger::Lost(int peer, bool sending, const std::string& why) const {
  return absl::UnavailableError(absl::StrCat("ring: the connection ", sending ? "to" : "from",
                                             " rank ", peer, " (", links_[peer]->address(),
                                             ") failed: ", why, "; the peer is gone"));
}

void Exchanger::Fail(Op& op, absl::Status s) {
  {
    std::lock_guard<std::mutex> lock(op.mu);
    if (op.error.ok()) op.error = std::move(s);
  }
  op.failed = true;
  ++signal_;
  signal_.notify_all();
  // The peers must fail too, and the other thread of this operation must wake.
  for (auto& link : links_) {
    if (link != nullptr) link->Shutdown();
  }
}

void Exchanger::SenderLoop() {
  for (;;) {
    Op* op = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return job_ != nullptr || stopping_; });
      if (stopping_) return;
      op = job_;
      job_ = nullptr;
    }
    Pump(*op, true, false);
    Signal(done_fd_);  // the last touch of *op
  }
}

absl::Status Exchanger::Run(const std::vector<SendUnit>& sends, const std::vector<RecvUnit>& recvs,
                            const std::function<absl::Status()>& aborted) {
  size_t send_bytes = 0, max_reduce = 0;
  for (const SendUnit& u : sends) send_bytes += u.bytes;
  for (const RecvUnit& u : recvs) {
    if (u.reduce_into != nullptr) max_reduce = std::max(max_reduce, u.bytes);
  }
  if (scratch_.size() * sizeof(float) < max_reduce) scratch_.resize(max_reduce / sizeof(float) + 1);
  Op op(sends, recvs, aborted, static_cast<int>(links_.size()));
  if (send_bytes < kThreadedBytes || recvs.empty()) {
    Pump(op, true, true);
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &op;
    }
    cv_.notify_all();
    Pump(op, false, true);
    // The sender must be done with `op` before it goes out of scope, whatever happened.
    uint64_t ignored;
    while (::read(done_fd_, &ignored, sizeof(ignored)) != sizeof(ignored)) {
      pollfd p[2] = {{done_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      ::poll(p, interrupted_ || op.failed ? 1 : 2, 100);
      if (!op.failed &&
          (interrupted_ || NowNs() - op.last_progress > absl::ToInt64Nanoseconds(timeout_))) {
        Pump(op, false, false);  // reports the interruption or the timeout, and stops the sender
      }
    }
  }
  std::lock_guard<std::mutex> lock(op.mu);
  return op.error;
}

// Moves bytes until this thread's share of `op` (its sends, its receives, or both) is done or
// the operation failed. With neither share, only checks for interruption and the timeout.
void Exchanger::Pump(Op& op, bool send, bool recv) {
  std::vector<pollfd> fds;
  for (;;) {
    if (op.failed) return;
    if (interrupted_) {
      absl::Status why = op.aborted();
      return Fail(op, why.ok() ? absl::CancelledError("ring: interrupted") : why);
    }
    const int64_t now = NowNs();
    if (now - op.last_progress > absl::ToInt64Nanoseconds(timeout_)) {
      const bool receiving = op.ri < op.recvs.size();
      const int peer = receiving ? op.recvs[op.ri].peer
                                 : (op.si < op.sends.size() ? op.sends[op.si].peer : rank_);
      return Fail(op, absl::DeadlineExceededError(absl::StrCat(
                          "ring: no data moved for ", absl::FormatDuration(timeout_), " (rank ",
                          rank_, " waiting on rank ", peer, "): a peer stopped answering")));
    }
    if (!send && !recv) return;
    bool progressed = false, waiting_on_recvs = false;
    fds.clear();
    while (send && op.si < op.sends.size()) {
      const SendUnit& u = op.sends[op.si];
      if (u.after_recvs > static_cast<int64_t>(op.recvs_done.load(std::memory_order_acquire))) {
        waiting_on_recvs = true;
        break;
      }
      op.in_send = true;
      const ssize_t k = u.bytes == op.soff
                            ? 0
                            : ::send(links_[u.peer]->SendFd(u.bytes), u.ptr + op.soff,
                                     u.bytes - op.soff, MSG_DONTWAIT | MSG_NOSIGNAL);
      const int err = errno;
      if (k < 0 || op.soff + static_cast<size_t>(k) < u.bytes) op.in_send = false;
      errno = err;
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        fds.push_back({links_[u.peer]->SendFd(u.bytes), POLLOUT | POLLRDHUP, 0});
        break;
      }
      if (k < 0) return Fail(op, Lost(u.peer, true, std::strerror(errno)));
      progressed = progressed || k > 0;
      op.soff += static_cast<size_t>(k);
      if (op.soff == u.bytes) {
        op.soff = 0;
        ++op.si;
        --op.sends_left[u.peer];
        op.in_send = false;
      }
    }
    while (recv && op.ri < op.recvs.size()) {
      const RecvUnit& u = op.recvs[op.ri];
      char* dst = u.reduce_into ? reinterpret_cast<char*>(scratch_.data()) : u.ptr;
      const ssize_t k = u.bytes == op.roff ? 0
                                           : ::recv(links_[u.peer]->RecvFd(u.bytes), dst + op.roff,
                                                    u.bytes - op.roff, MSG_DONTWAIT);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        fds.push_back({links_[u.peer]->RecvFd(u.bytes), POLLIN, 0});
        break;
      }
      if (k < 0) return Fail(op, Lost(u.peer, false, std::strerror(errno)));
      if (k == 0 && u.bytes != op.roff) return Fail(op, Lost(u.peer, false, "end of stream"));
      progressed = true;
      op.roff += static_cast<size_t>(k);
      if (op.roff == u.bytes) {
        if (u.reduce_into) AddInto(u.reduce_into, scratch_.data(), u.bytes / sizeof(float));
        op.roff = 0;
        op.recvs_done.store(++op.ri, std::memory_order_release);
        ++signal_;
        signal_.notify_one();
      }
    }
    if (progressed) op.last_progress = NowNs();
    if ((!send || op.si == op.sends.size()) && (!recv || op.ri == op.recvs.size())) return;
    if (progressed) continue;
    if (!recv && waiting_on_recvs) {
      // The receiving thread bumps signal_ after each receive, failure and interruption.
      const uint32_t seen = signal_.load();
      if (op.sends[op.si].after_recvs > static_cast<int64_t>(op.recvs_done.load()) && !op.failed &&
          !interrupted_) {
        signal_.wait(seen);
      }
      continue;
    }
    // A peer this rank still sends to must not leave: watch for its end of the connection.
    const size_t watched = fds.size();
    if (recv) {
      for (size_t p = 0; p < links_.size(); ++p) {
        if (links_[p] != nullptr && op.sends_left[p] > 0) {
          // The first connection: a peer that leaves closes both.
          fds.push_back({links_[p]->SendFd(0), POLLRDHUP, 0});
        }
      }
    }
    fds.push_back({wake_fd_, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      const bool ended = (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
      if (!ended || (i < watched && (fds[i].events & POLLOUT) == 0)) continue;
      for (size_t p = 0; p < links_.size(); ++p) {
        if (links_[p] == nullptr || !links_[p]->Owns(fds[i].fd)) continue;
        // A watched peer may have left because it got our last bytes the moment before the
        // sending thread counted them: only bytes not yet handed to send() are owed.
        if (i >= watched && (op.in_send || op.sends_left[p] == 0)) continue;
        return Fail(op, Lost(static_cast<int>(p), true, "the peer closed it"));
      }
    }
  }
}

}  // namespace lockstep::trainer::comm
