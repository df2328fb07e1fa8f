#include "trainer/comm/peer_link.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::comm {

namespace {

constexpr char kMagic[8] = {'L', 'S', 'L', 'I', 'N', 'K', '0', '2'};
constexpr uint32_t kMaxToken = 4096;
// A connection that does not finish its handshake within this is dropped (the acceptor takes
// one handshake at a time, so a silent stranger must not hold it for the whole setup).
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);

struct Hello {
  char magic[8];
  uint32_t rank;
  uint32_t size;
  uint32_t token_len;
  uint32_t first;  // 1: the pair's first connection; 0: its second
};

std::string Errno(int e) { return std::strerror(e); }

// Waits until fd is ready for `events` or `deadline` passes; false on timeout.
bool WaitFd(int fd, short events, absl::Time deadline) {
  for (;;) {
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p{fd, events, 0};
    const int k = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 100)));
    if (k > 0) return true;
    if (k < 0 && errno != EINTR) return true;  // the next call reports the error
    if (absl::Now() >= deadline) return false;
  }
}

// Moves all of `bytes` on a non-blocking socket before `deadline`; an error names what failed.
absl::Status Transfer(int fd, char* buf, size_t bytes, bool write, absl::Time deadline) {
  for (size_t done = 0; done < bytes;) {
    const ssize_t k = write ? ::send(fd, buf + done, bytes - done, MSG_NOSIGNAL)
                            : ::recv(fd, buf + done, bytes - done, 0);
    if (k > 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return absl::UnavailableError("the connection closed");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return absl::UnavailableError(Errno(errno));
    if (!WaitFd(fd, write ? POLLOUT : POLLIN, deadline)) {
      return absl::DeadlineExceededError("the handshake timed out");
    }
  }
  return absl::OkStatus();
}

void Tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// One attempt to connect to host:port; -1 (and `why`) when nothing answered.
int Connect(const std::string& host, int port, absl::Time deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0) {
    *why = absl::StrCat("resolving ", host, ": ", ::gai_strerror(e));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err =
            WaitFd(fd, POLLOUT, std::min(deadline, absl::Now() + absl::Seconds(1))) ? 0 : ETIMEDOUT;
        socklen_t len = sizeof(err);
        if (err == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err != 0) {
      *why = Errno(err);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  return fd;
}

struct Setup {
  const LinkOptions& o;
  const int n;
  absl::Time deadline;
  std::atomic<bool> stop{false};
  std::mutex mu;
  absl::Status error;                      // the first failure of a dialer
  std::vector<int> first_fds, second_fds;  // by peer (-1 until connected)

  Setup(const LinkOptions& options, int ranks, absl::Time until)
      : o(options), n(ranks), deadline(until), first_fds(ranks, -1), second_fds(ranks, -1) {}
  ~Setup() {  // closes what was not handed to a PeerLink
    for (int fd : first_fds) {
      if (fd >= 0) ::close(fd);
    }
    for (int fd : second_fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  void Fail(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = std::move(s);
    stop = true;
  }
  // Keeps fd as the pair's first or second connection to `peer`; false (fd not kept) when
  // that one is already held.
  bool Add(int peer, int fd, bool first) {
    Tune(fd);
    std::lock_guard<std::mutex> lock(mu);
    int& slot = (first ? first_fds : second_fds)[static_cast<size_t>(peer)];
    if (slot >= 0) return false;
    slot = fd;
    return true;
  }
  bool Linked(int peer) {
    std::lock_guard<std::mutex> lock(mu);
    const auto u = static_cast<size_t>(peer);
    return first_fds[u] >= 0 && second_fds[u] >= 0;
  }
};

// Dials `peer` until it answers (it may not listen yet) and presents this rank's token, for
// the pair's first connection and then its second.
void Dial(Setup& s, int peer, const std::string& host, int port) {
  Hello hello{};
  std::memcpy(hello.magic, kMagic, 8);
  hello.rank = static_cast<uint32_t>(s.o.rank);
  hello.size = static_cast<uint32_t>(s.n);
  hello.token_len = static_cast<uint32_t>(s.o.token.size());
  std::string why = "no attempt finished";
  for (const bool first : {true, false}) {
    hello.first = first ? 1 : 0;
    std::string greeting(reinterpret_cast<const char*>(&hello), sizeof(hello));
    greeting += s.o.token;
    for (;;) {
      if (s.stop) return;
      if (absl::Now() >= s.deadline) {
        return s.Fail(absl::DeadlineExceededError(
            absl::StrCat("ring: could not connect to rank ", peer, " at ", s.o.addresses[peer],
                         " within ", absl::FormatDuration(s.o.connect_timeout), " (", why, ")")));
      }
      const int fd = Connect(host, port, s.deadline, &why);
      if (fd < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // not listening yet
        continue;
      }
      // A connection that ends before the answer (the peer's setup ended, or it restarts) is
      // tried again; only an answer of no is a refusal.
      char answer = 0;
      absl::Status w = Transfer(fd, greeting.data(), greeting.size(), true, s.deadline);
      if (w.ok()) w = Transfer(fd, &answer, 1, false, s.deadline);
      if (!w.ok()) {
        ::close(fd);
        why = absl::StrCat("the handshake ended: ", w.message());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (answer != 1) {
        ::close(fd);
        return s.Fail(absl::PermissionDeniedError(
            absl::StrCat("ring: rank ", peer, " at ", s.o.addresses[peer],
                         " refused this rank (a different job token, or not this job's ring)")));
      }
      if (!s.Add(peer, fd, first)) ::close(fd);
      break;
    }
  }
}

// Takes one handshake; the peer's rank when it is one of `expected` (and in `first` whether
// this is the pair's first connection), else -1 and `refused`.
int Handshake(Setup& s, int fd, const std::vector<int>& expected, bool* first,
              std::string* refused) {
  const absl::Time deadline = std::min(s.deadline, absl::Now() + kHandshakeTimeout);
  Hello hello{};
  if (!Transfer(fd, reinterpret_cast<char*>(&hello), sizeof(hello), false, deadline).ok() ||
      std::memcmp(hello.magic, kMagic, 8) != 0 || hello.token_len > kMaxToken) {
    *refused = "a connection that is not a ring peer";
    return -1;
  }
  std::string token(hello.token_len, '\0');
  const bool token_ok = Transfer(fd, token.data(), token.size(), false, deadline).ok() &&
                        TokensEqual(token, s.o.token);
  const int rank = static_cast<int>(hello.rank);
  const bool ok = token_ok && hello.size == static_cast<uint32_t>(s.n) &&
                  std::find(expected.begin(), expected.end(), rank) != expected.end();
  if (!ok) {
    *refused = !token_ok ? "a connection with a wrong job token"
                         : absl::StrCat("rank ", hello.rank, " of ", hello.size);
  }
  *first = hello.first != 0;
  char reply = ok ? 1 : 0;
  if (!Transfer(fd, &reply, 1, true, deadline).ok()) return -1;
  return ok ? rank : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LinkListener>> LinkListener::Bind(const std::string& host,
                                                                 int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0) {
    return absl::UnavailableError(
        absl::StrCat("ring: cannot resolve ", host, ": ", ::gai_strerror(e)));
  }
  const int fd =
      ::socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, res->ai_protocol);
  int one = 1;
  int err = fd < 0 ? errno : 0;
  if (err == 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (err == 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) != 0) err = errno;
  if (err == 0 && ::listen(fd, SOMAXCONN) != 0) err = errno;
  ::freeaddrinfo(res);
  if (err != 0) {
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("ring: cannot listen on ", host, ":", port, ": ", Errno(err)));
  }
  return std::unique_ptr<LinkListener>(new LinkListener(fd));
}

LinkListener::~LinkListener() { ::close(fd_); }

int LinkListener::port() const {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

PeerLink::~PeerLink() {
  ::close(first_fd_);
  ::close(second_fd_);
}
void PeerLink::Shutdown() {
  ::shutdown(first_fd_, SHUT_RDWR);
  ::shutdown(second_fd_, SHUT_RDWR);
}

bool Dials(int n, int rank, int peer) {
  const int d = ((peer - rank) % n + n) % n;
  return d < n - d || (d == n - d && rank < peer);
}

absl::StatusOr<std::vector<std::unique_ptr<PeerLink>>> ConnectPeers(LinkListener& listener,
                                                                    const LinkOptions& o,
                                                                    const std::vector<int>& peers) {
  Setup s(o, static_cast<int>(o.addresses.size()), absl::Now() + o.connect_timeout);
  std::vector<int> expected;  // the peers that dial this rank
  std::vector<std::thread> dialers;
  for (int p : peers) {
    if (!Dials(s.n, o.rank, p)) {
      expected.push_back(p);
      continue;
    }
    absl::StatusOr<std::pair<std::string, int>> hp = SplitHostPort(o.addresses[p]);
    if (!hp.ok()) {
      s.Fail(hp.status());
      break;
    }
    dialers.emplace_back(Dial, std::ref(s), p, hp->first, hp->second);
  }
  // Accept here while the dialers dial, until every expected peer has presented the token.
  std::string refused;
  size_t accepted = 0;
  while (!s.stop && accepted < expected.size()) {
    if (absl::Now() >= s.deadline) {
      std::string missing;
      for (int p : expected) {
        if (!s.Linked(p)) missing = std::to_string(p);
      }
      s.Fail(absl::DeadlineExceededError(absl::StrCat(
          "ring: rank ", missing, " did not connect within ",
          absl::FormatDuration(o.connect_timeout), refused.empty() ? "" : "; refused " + refused)));
      break;
    }
    if (!WaitFd(listener.fd(), POLLIN,
                std::min(s.deadline, absl::Now() + absl::Milliseconds(100)))) {
      continue;
    }
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    bool first = false;
    const int peer = Handshake(s, fd, expected, &first, &refused);
    if (peer < 0 || !s.Add(peer, fd, first)) {
      ::close(fd);
      continue;
    }
    if (s.Linked(peer)) ++accepted;
  }
  // Wait for the dialers (they give up at the deadline, or at once after a failure).
  for (std::thread& t : dialers) t.join();
  if (!s.error.ok()) {
    // Whichever side timed out first, a refused stranger may be why: say so.
    if (absl::IsDeadlineExceeded(s.error) && !refused.empty() &&
        s.error.message().find("refused") == std::string_view::npos) {
      return absl::DeadlineExceededError(absl::StrCat(s.error.message(), "; refused ", refused));
    }
    return s.error;
  }
  std::vector<std::unique_ptr<PeerLink>> links(static_cast<size_t>(s.n));
  for (int p : peers) {
    const auto u = static_cast<size_t>(p);
    links[u] = std::make_unique<PeerLink>(p, o.addresses[u], s.first_fds[u], s.second_fds[u],
                                          Dials(s.n, o.rank, p));
    s.first_fds[u] = s.second_fds[u] = -1;
  }
  return links;
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError("address \"" + address + "\" is not host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) {
      return absl::InvalidArgumentError("address \"" + address + "\" has a bad port");
    }
    port = port * 10 + (c - '0');
  }
  if (port > 65535) return absl::InvalidArgumentError("address \"" + address + "\" has a bad port");
  return std::make_pair(host, port);
}

bool TokensEqual(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& longer = a.size() >= b.size() ? a : b;
  for (size_t i = 0; i < longer.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace lockstep::trainer::comm
