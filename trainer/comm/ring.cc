#include "trainer/comm/ring.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::comm {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

struct RingListener::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
};

RingListener::RingListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RingListener::~RingListener() = default;
std::unique_ptr<RingListener::Impl> RingListener::TakeImpl() { return std::move(impl_); }
int RingListener::port() const {
  error_code ec;
  return impl_ ? impl_->acceptor.local_endpoint(ec).port() : 0;
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

absl::StatusOr<std::unique_ptr<RingListener>> RingListener::Bind(const std::string& host,
                                                                 int port) {
  auto impl = std::make_unique<Impl>();
  error_code ec;
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat("ring: cannot resolve ", host, ": ", ec.message()));
  }
  tcp::endpoint ep = endpoints.begin()->endpoint();
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("ring: cannot listen on ", host, ":", port, ": ", ec.message()));
  }
  return std::unique_ptr<RingListener>(new RingListener(std::move(impl)));
}

namespace {

constexpr char kMagic[8] = {'L', 'S', 'R', 'I', 'N', 'G', '0', '1'};
constexpr uint32_t kMaxToken = 4096;

struct Hello {
  char magic[8];
  uint32_t rank;
  uint32_t size;
  uint32_t token_len;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void AddInto(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

class Ring final : public QueuedCollective {
 public:
  Ring(RingOptions o, std::unique_ptr<RingListener::Impl> io_owner)
      : o_(std::move(o)), n_(static_cast<int>(o_.addresses.size())), l_(std::move(io_owner)) {}
  ~Ring() override { StopExecutor(); }

  int rank() const override { return o_.rank; }
  int size() const override { return n_; }
  std::string name() const override { return "ring"; }

  absl::Status Connect();
  void Start() {
    WatchNext();
    StartExecutor();
  }

 protected:
  struct SendUnit {
    const char* ptr;
    size_t bytes;
    size_t after_recvs;  // how many receive units must be done before this one goes
  };
  struct RecvUnit {
    char* ptr;  // where the bytes land (the scratch buffer when reducing)
    size_t bytes;
    float* reduce_into = nullptr;  // non-null: ptr's floats are added here
  };

  // Runs one operation's units: receives in order, sends in order as their inputs arrive.
  absl::Status Exchange(const std::vector<SendUnit>& sends, const std::vector<RecvUnit>& recvs);

  // The units of a series of ring steps over a chunked buffer. At step t this rank sends
  // chunk send_chunk(t) and receives chunk recv_chunk(t); unit k of step t's send depends on
  // unit k of step t-1's receive (the data it forwards), except at step 0.
  void RingSteps(float* buf, const std::function<Range(int)>& chunk, int steps,
                 const std::function<int(int)>& send_chunk,
                 const std::function<int(int)>& recv_chunk, bool reduce, bool first_depends,
                 std::vector<SendUnit>* sends, std::vector<RecvUnit>* recvs);

  int Units(int64_t max_chunk_elems) const {
    const int64_t bytes = max_chunk_elems * static_cast<int64_t>(sizeof(float));
    return static_cast<int>(std::max<int64_t>(1, (bytes + o_.unit_bytes - 1) / o_.unit_bytes));
  }
  int Mod(int x) const { return ((x % n_) + n_) % n_; }

  absl::Status RunAllReduce(float* data, int64_t n) override {
    if (n_ == 1 || n == 0) return absl::OkStatus();
    auto chunk = [&](int c) { return ChunkRange(n, n_, c); };
    std::vector<SendUnit> sends;
    std::vector<RecvUnit> recvs;
    const int r = o_.rank;
    // Reduce-scatter: rank r ends holding the full sum of chunk r.
    RingSteps(
        data, chunk, n_ - 1, [&](int t) { return Mod(r - t - 1); },
        [&](int t) { return Mod(r - t - 2); }, true, false, &sends, &recvs);
    // All-gather: chunk r travels around the ring.
    RingSteps(
        data, chunk, n_ - 1, [&](int t) { return Mod(r - t); },
        [&](int t) { return Mod(r - t - 1); }, false, true, &sends, &recvs);
    return Exchange(sends, recvs);
  }

  absl::Status RunReduceScatter(const float* in, int64_t n, float* out) override {
    const Range mine = ChunkRange(n, n_, o_.rank);
    if (n_ == 1) {
      std::copy(in, in + n, out);
      return absl::OkStatus();
    }
    work_.assign(in, in + n);
    auto chunk = [&](int c) { return ChunkRange(n, n_, c); };
    std::vector<SendUnit> sends;
    std::vector<RecvUnit> recvs;
    const int r = o_.rank;
    RingSteps(
        work_.data(), chunk, n_ - 1, [&](int t) { return Mod(r - t - 1); },
        [&](int t) { return Mod(r - t - 2); }, true, false, &sends, &recvs);
    if (absl::Status s = Exchange(sends, recvs); !s.ok()) return s;
    std::copy(work_.begin() + mine.begin, work_.begin() + mine.end, out);
    return absl::OkStatus();
  }

  absl::Status RunAllGather(const float* in, int64_t n, float* out) override {
    std::copy(in, in + n, out + o_.rank * n);
    if (n_ == 1 || n == 0) return absl::OkStatus();
    auto chunk = [&](int c) { return Range{c * n, (c + 1) * n}; };
    std::vector<SendUnit> sends;
    std::vector<RecvUnit> recvs;
    const int r = o_.rank;
    RingSteps(
        out, chunk, n_ - 1, [&](int t) { return Mod(r - t); },
        [&](int t) { return Mod(r - t - 1); }, false, false, &sends, &recvs);
    return Exchange(sends, recvs);
  }

  absl::Status RunBroadcast(float* data, int64_t n, int root) override {
    if (root < 0 || root >= n_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " out of range"));
    }
    if (n_ == 1 || n == 0) return absl::OkStatus();
    const int units = Units(n);
    std::vector<SendUnit> sends;
    std::vector<RecvUnit> recvs;
    const bool last = Mod(o_.rank + 1) == root;
    for (int k = 0; k < units; ++k) {
      const Range u = ChunkRange(n, units, k);
      char* p = reinterpret_cast<char*>(data + u.begin);
      const size_t bytes = u.size() * sizeof(float);
      if (o_.rank != root) recvs.push_back({p, bytes});
      if (!last) sends.push_back({p, bytes, o_.rank == root ? 0 : static_cast<size_t>(k + 1)});
    }
    return Exchange(sends, recvs);
  }

  absl::Status RunBarrier() override {
    float one = 1;
    return RunAllReduce(&one, 1);
  }

  void Interrupt() override { l_->io.stop(); }

 private:
  absl::Status Failed(const error_code& ec, bool sending) {
    if (absl::Status a = aborted(); !a.ok()) return a;
    const int peer = sending ? Mod(o_.rank + 1) : Mod(o_.rank - 1);
    return absl::UnavailableError(absl::StrCat("ring: the connection ", sending ? "to" : "from",
                                               " rank ", peer, " (", o_.addresses[peer],
                                               ") failed: ", ec.message(), "; the peer is gone"));
  }

  // The next rank never sends on our outgoing connection, so a read on it completes only when
  // that rank is gone: failures are seen even by a rank that is only sending.
  void WatchNext() {
    send_.async_read_some(asio::buffer(&watch_byte_, 1), [this](const error_code& ec, size_t) {
      next_lost_ = ec ? ec : asio::error::make_error_code(asio::error::connection_reset);
      l_->io.stop();
    });
  }

  RingOptions o_;
  const int n_;
  std::unique_ptr<RingListener::Impl> l_;  // io_context and acceptor
  tcp::socket send_{l_->io};               // to rank + 1
  tcp::socket recv_{l_->io};               // from rank - 1
  std::vector<float> scratch_;
  std::vector<float> work_;
  char watch_byte_ = 0;
  error_code next_lost_;
};

void Ring::RingSteps(float* buf, const std::function<Range(int)>& chunk, int steps,
                     const std::function<int(int)>& send_chunk,
                     const std::function<int(int)>& recv_chunk, bool reduce, bool first_depends,
                     std::vector<SendUnit>* sends, std::vector<RecvUnit>* recvs) {
  int64_t max_chunk = 0;
  for (int c = 0; c < n_; ++c) max_chunk = std::max(max_chunk, chunk(c).size());
  const int units = Units(max_chunk);
  const size_t base_recvs = recvs->size();
  for (int t = 0; t < steps; ++t) {
    const Range sc = chunk(send_chunk(t));
    const Range rc = chunk(recv_chunk(t));
    for (int k = 0; k < units; ++k) {
      const Range su = ChunkRange(sc.size(), units, k);
      const Range ru = ChunkRange(rc.size(), units, k);
      // Step t forwards what step t-1 received (the previous series' last step for the first
      // step of a series that continues one).
      size_t after = 0;
      if (t > 0) {
        after = base_recvs + static_cast<size_t>((t - 1) * units + k + 1);
      } else if (first_depends) {
        after = base_recvs - units + k + 1;
      }
      sends->push_back({reinterpret_cast<const char*>(buf + sc.begin + su.begin),
                        su.size() * sizeof(float), after});
      float* dst = buf + rc.begin + ru.begin;
      if (reduce) {
        recvs->push_back({nullptr, ru.size() * sizeof(float), dst});
      } else {
        recvs->push_back({reinterpret_cast<char*>(dst), ru.size() * sizeof(float)});
      }
    }
  }
}

absl::Status Ring::Exchange(const std::vector<SendUnit>& sends,
                            const std::vector<RecvUnit>& recvs) {
  size_t max_reduce = 0;
  for (const RecvUnit& u : recvs) {
    if (u.reduce_into != nullptr) max_reduce = std::max(max_reduce, u.bytes);
  }
  if (scratch_.size() * sizeof(float) < max_reduce) scratch_.resize(max_reduce / sizeof(float) + 1);

  size_t si = 0, ri = 0;
  bool sending = false, receiving = false;
  error_code send_err, recv_err;
  double last_progress = Now();
  std::function<void()> pump_send, pump_recv;
  auto maybe_done = [&] {
    if (si == sends.size() && ri == recvs.size()) l_->io.stop();
  };
  pump_send = [&] {
    while (!sending && !send_err && si < sends.size() && sends[si].after_recvs <= ri) {
      if (sends[si].bytes == 0) {
        ++si;
        continue;
      }
      sending = true;
      asio::async_write(send_, asio::buffer(sends[si].ptr, sends[si].bytes),
                        [&](const error_code& ec, size_t) {
                          sending = false;
                          last_progress = Now();
                          if (ec) {
                            send_err = ec;
                            return;
                          }
                          ++si;
                          pump_send();
                          maybe_done();
                        });
    }
  };
  pump_recv = [&] {
    while (!receiving && !recv_err && ri < recvs.size()) {
      const RecvUnit& u = recvs[ri];
      if (u.bytes == 0) {
        ++ri;
        continue;
      }
      receiving = true;
      char* dst = u.reduce_into ? reinterpret_cast<char*>(scratch_.data()) : u.ptr;
      asio::async_read(recv_, asio::buffer(dst, u.bytes), [&](const error_code& ec, size_t) {
        receiving = false;
        last_progress = Now();
        if (ec) {
          recv_err = ec;
          return;
        }
        const RecvUnit& done = recvs[ri];
        if (done.reduce_into) {
          AddInto(done.reduce_into, scratch_.data(),
                  static_cast<int64_t>(done.bytes / sizeof(float)));
        }
        ++ri;
        pump_send();
        pump_recv();
        maybe_done();
      });
    }
  };
  pump_recv();
  pump_send();

  absl::Status result;
  for (;;) {
    if (send_err || next_lost_) {
      result = Failed(send_err ? send_err : next_lost_, true);
    } else if (recv_err) {
      result = Failed(recv_err, false);
    } else if (si == sends.size() && ri == recvs.size()) {
      break;
    } else if (absl::Status a = aborted(); !a.ok()) {
      result = a;
    } else if (Now() - last_progress > absl::ToDoubleSeconds(o_.timeout)) {
      result = absl::DeadlineExceededError(absl::StrCat(
          "ring: no data moved for ", absl::FormatDuration(o_.timeout), " (rank ", o_.rank,
          " waiting on ", ri < recvs.size() ? "rank " + std::to_string(Mod(o_.rank - 1)) : "",
          si < sends.size() && ri == recvs.size() ? "rank " + std::to_string(Mod(o_.rank + 1)) : "",
          "): a peer stopped answering"));
    }
    if (!result.ok()) break;
    l_->io.restart();
    l_->io.run_for(std::chrono::milliseconds(200));
  }
  if (!result.ok()) {
    // Handlers refer to this frame: cancel what is in flight and let them run out.
    error_code ignored;
    send_.cancel(ignored);
    recv_.cancel(ignored);
    send_.shutdown(tcp::socket::shutdown_both, ignored);
    recv_.shutdown(tcp::socket::shutdown_both, ignored);
    send_.close(ignored);
    recv_.close(ignored);
    do {
      l_->io.restart();
    } while (l_->io.poll() > 0);
  }
  return result;
}

absl::Status Ring::Connect() {
  if (n_ == 1) return absl::OkStatus();
  asio::io_context& io = l_->io;
  const int next = Mod(o_.rank + 1);
  const int prev = Mod(o_.rank - 1);
  absl::StatusOr<std::pair<std::string, int>> hp = SplitHostPort(o_.addresses[next]);
  if (!hp.ok()) return hp.status();

  bool accepted = false, connected = false;
  bool stopping = false;  // set when setup ends: handlers that run after it start nothing new
  absl::Status connect_error;
  std::string refused;  // why the last acceptance was refused

  // Accept: handshakes one at a time until the previous rank presents the right token.
  std::function<void()> accept_one = [&] {
    if (stopping) return;
    auto sock = std::make_shared<tcp::socket>(io);
    l_->acceptor.async_accept(*sock, [&, sock](const error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) return accept_one();
      auto hello = std::make_shared<Hello>();
      asio::async_read(
          *sock, asio::buffer(hello.get(), sizeof(Hello)),
          [&, sock, hello](const error_code& ec2, size_t) {
            if (ec2 == asio::error::operation_aborted) return;
            if (ec2 || std::memcmp(hello->magic, kMagic, 8) != 0 || hello->token_len > kMaxToken) {
              refused = "a connection that is not a ring peer";
              return accept_one();
            }
            auto token = std::make_shared<std::string>(hello->token_len, '\0');
            asio::async_read(
                *sock, asio::buffer(token->data(), token->size()),
                [&, sock, hello, token](const error_code& ec3, size_t) {
                  if (ec3 == asio::error::operation_aborted) return;
                  const bool token_ok = !ec3 && TokensEqual(*token, o_.token);
                  const bool ok =
                      token_ok && hello->rank == uint32_t(prev) && hello->size == uint32_t(n_);
                  if (!ok) {
                    refused = !token_ok ? "a connection with a wrong job token"
                                        : absl::StrCat("rank ", hello->rank, " of ", hello->size,
                                                       ", expected rank ", prev, " of ", n_);
                  }
                  auto reply = std::make_shared<char>(ok ? 1 : 0);
                  asio::async_write(*sock, asio::buffer(reply.get(), 1),
                                    [&, sock, ok, reply](const error_code& ec4, size_t) {
                                      if (ok && !ec4) {
                                        recv_ = std::move(*sock);
                                        accepted = true;
                                        return;
                                      }
                                      if (ec4 != asio::error::operation_aborted) {
                                        accept_one();
                                      }
                                    });
                });
          });
    });
  };

  // Connect: retried while the next rank is not listening yet.
  Hello hello{};
  std::memcpy(hello.magic, kMagic, 8);
  hello.rank = static_cast<uint32_t>(o_.rank);
  hello.size = static_cast<uint32_t>(n_);
  hello.token_len = static_cast<uint32_t>(o_.token.size());
  std::string greeting(reinterpret_cast<const char*>(&hello), sizeof(hello));
  greeting += o_.token;
  char answer = 0;
  asio::steady_timer retry(io);
  tcp::resolver resolver(io);
  std::string last_connect_error = "no attempt finished";
  std::function<void()> dial = [&] {
    if (stopping) return;
    resolver.async_resolve(
        hp->first, std::to_string(hp->second),
        [&](const error_code& ec, tcp::resolver::results_type results) {
          auto again = [&](const std::string& why) {
            last_connect_error = why;
            retry.expires_after(std::chrono::milliseconds(100));
            retry.async_wait([&](const error_code& e) {
              if (!e) dial();
            });
          };
          if (ec == asio::error::operation_aborted) return;
          if (ec) return again("resolving " + hp->first + ": " + ec.message());
          asio::async_connect(
              send_, results, [&, again](const error_code& ec2, const tcp::endpoint&) {
                if (ec2 == asio::error::operation_aborted) return;
                if (ec2) {
                  error_code ignored;
                  send_.close(ignored);
                  return again(ec2.message());
                }
                asio::async_write(
                    send_, asio::buffer(greeting), [&](const error_code& ec3, size_t) {
                      if (ec3) {
                        connect_error =
                            absl::UnavailableError("ring: handshake with " + o_.addresses[next] +
                                                   " failed: " + ec3.message());
                        return;
                      }
                      asio::async_read(
                          send_, asio::buffer(&answer, 1), [&](const error_code& ec4, size_t) {
                            if (ec4 == asio::error::operation_aborted) return;
                            if (ec4 || answer != 1) {
                              connect_error = absl::PermissionDeniedError(
                                  absl::StrCat("ring: rank ", next, " at ", o_.addresses[next],
                                               " refused this rank (a different job token, or not "
                                               "this job's ring)"));
                              return;
                            }
                            connected = true;
                          });
                    });
              });
        });
  };

  accept_one();
  dial();
  const double deadline = Now() + absl::ToDoubleSeconds(o_.connect_timeout);
  absl::Status result;
  while (!(accepted && connected)) {
    if (!connect_error.ok()) {
      result = connect_error;
    } else if (Now() > deadline) {
      result = absl::DeadlineExceededError(
          !connected
              ? absl::StrCat("ring: could not connect to rank ", next, " at ", o_.addresses[next],
                             " within ", absl::FormatDuration(o_.connect_timeout), " (",
                             last_connect_error, ")")
              : absl::StrCat("ring: rank ", prev, " did not connect within ",
                             absl::FormatDuration(o_.connect_timeout),
                             refused.empty() ? "" : "; refused " + refused));
    }
    if (!result.ok()) break;
    io.restart();
    io.run_for(std::chrono::milliseconds(100));
  }
  stopping = true;
  error_code ignored;
  l_->acceptor.close(ignored);
  retry.cancel();
  resolver.cancel();
  if (!result.ok()) {
    send_.close(ignored);
    recv_.close(ignored);
  }
  io.restart();
  io.run();  // let cancelled handlers finish: they refer to this frame
  if (!result.ok()) return result;
  send_.set_option(tcp::no_delay(true), ignored);
  recv_.set_option(tcp::no_delay(true), ignored);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> ConnectRing(RingOptions options) {
  const int n = static_cast<int>(options.addresses.size());
  if (n < 1 || options.rank < 0 || options.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring: rank ", options.rank, " of ", n, " addresses"));
  }
  if (options.listener == nullptr) return absl::InvalidArgumentError("ring: no listener");
  // The listener's io_context and acceptor become the ring's.
  std::unique_ptr<RingListener::Impl> io = options.listener->TakeImpl();
  if (io == nullptr) return absl::InvalidArgumentError("ring: the listener was already used");
  auto ring = std::make_unique<Ring>(std::move(options), std::move(io));
  if (absl::Status s = ring->Connect(); !s.ok()) return s;
  ring->Start();
  return std::unique_ptr<Collective>(std::move(ring));
}

}  // namespace lockstep::trainer::comm
