// All-reduce bus bandwidth of the TCP backend, ranks as separate processes on loopback, and
// the loopback TCP ceiling measured the way a ring uses the links (every rank sending to the
// next and receiving from the previous at once).
//
//   allreduce_bench RANKS [--ceiling | --ceiling-cached | --algorithm ring|halving-doubling|auto]
//                   [--min-bytes B] [--max-bytes B]
//
// Prints one line per size (4 KiB .. 256 MiB, or from/up to B): bytes, seconds per all-reduce,
// algbw and busbw in GB/s, busbw = algbw * 2(n-1)/n (the nccl-tests formula). --algorithm forces
// one all-reduce algorithm for every size (default: auto, the backend's choice by size).
// --ceiling prints, per size, the per-rank throughput of plain TCP sockets in the same ring
// pattern, sending from and receiving into buffers of the message's size (as an all-reduce of
// that size must read and write its buffer); --ceiling-cached the same through one 4 MiB
// buffer each way, which stays in the CPU's cache: the most the sockets move, a bound no
// all-reduce larger than the cache reaches. Any failure prints the rank and its status on stderr
// and exits 1. Compared with torch.distributed/gloo by bench/allreduce_vs_gloo.sh.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trainer/comm/ring.h"

using namespace lockstep::trainer::comm;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t min_bytes = 4 << 10;
int64_t max_bytes = int64_t{256} << 20;

std::vector<int64_t> Sizes() {
  std::vector<int64_t> s;
  for (int64_t b = 4 << 10; b <= max_bytes; b *= 4) {
    if (b >= min_bytes) s.push_back(b);
  }
  return s;
}

absl::Status Errno() { return absl::UnavailableError(std::strerror(errno)); }

[[noreturn]] void Die(int rank, const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "allreduce_bench: rank %d: %s: %s\n", rank, what.c_str(),
               s.ToString().c_str());
  ::_exit(1);
}

int Iterations(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{1} << 29) / bytes, 3, 500));
}

// Ports that were free a moment ago.
std::vector<int> FreePorts(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ports.push_back(ntohs(a.sin_port));
    fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

void RingRank(int rank, const std::vector<std::string>& addrs, std::optional<Algorithm> algorithm,
              int out_fd) {
  auto p = SplitHostPort(addrs[rank]);
  auto listener = RingListener::Bind(p->first, p->second);
  if (!listener.ok()) Die(rank, "listen", listener.status());
  RingOptions o;
  o.rank = rank;
  o.addresses = addrs;
  o.listener = std::move(*listener);
  o.token = "bench";
  o.all_reduce = algorithm;
  auto ring = ConnectRing(std::move(o));
  if (!ring.ok()) Die(rank, "connect", ring.status());
  const int n = static_cast<int>(addrs.size());
  for (int64_t bytes : Sizes()) {
    const std::string what = "all-reduce of " + std::to_string(bytes) + " bytes";
    std::vector<float> data(bytes / 4, 1.0f);
    for (int w = 0; w < 2; ++w) {
      if (absl::Status s = (*ring)->AllReduce(data.data(), bytes / 4)->Wait(); !s.ok()) {
        Die(rank, what, s);
      }
    }
    if (absl::Status s = (*ring)->Barrier()->Wait(); !s.ok()) Die(rank, "barrier", s);
    const int iters = Iterations(bytes);
    const double t0 = Now();
    for (int i = 0; i < iters; ++i) {
      if (absl::Status s = (*ring)->AllReduce(data.data(), bytes / 4)->Wait(); !s.ok()) {
        Die(rank, what, s);
      }
    }
    const double dt = (Now() - t0) / iters;
    if (rank == 0) {
      const double alg = static_cast<double>(bytes) / dt / 1e9;
      char line[200];
      int len = std::snprintf(line, sizeof(line), "%lld %.9f %.3f %.3f\n",
                              static_cast<long long>(bytes), dt, alg, alg * 2 * (n - 1) / n);
      (void)!::write(out_fd, line, len);
    }
  }
}

// Plain sockets in a ring: send `bytes` to the next rank while receiving as much from the
// previous one; rank 0 reports bytes / time (the per-link throughput a ring step gets).
// `cached`: through 4 MiB buffers, else buffers of `bytes`.
void CeilingRank(int rank, const std::vector<int>& ports, bool cached, int out_fd) {
  const int n = static_cast<int>(ports.size());
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(ports[rank]));
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die(rank, "bind", Errno());
  ::listen(lfd, 4);
  int out = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in b = a;
  b.sin_port = htons(static_cast<uint16_t>(ports[(rank + 1) % n]));
  while (::connect(out, reinterpret_cast<sockaddr*>(&b), sizeof(b)) != 0) {
    ::close(out);
    out = ::socket(AF_INET, SOCK_STREAM, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int in = ::accept(lfd, nullptr, nullptr);
  ::setsockopt(out, IPPROTO_TCP, 1 /*TCP_NODELAY*/, &one, sizeof(one));
  std::vector<char> sbuf, rbuf;
  // Moves `bytes` each way, through the buffers from their start again whenever they end.
  auto exchange = [&](int64_t bytes) {
    auto move = [&](int fd, std::vector<char>& buf, bool sending) {
      for (int64_t done = 0; done < bytes;) {
        const auto at = static_cast<size_t>(done % static_cast<int64_t>(buf.size()));
        const size_t len = std::min<size_t>(static_cast<size_t>(bytes - done), buf.size() - at);
        const ssize_t k =
            sending ? ::send(fd, buf.data() + at, len, 0) : ::recv(fd, buf.data() + at, len, 0);
        if (k <= 0) Die(rank, sending ? "send" : "recv", Errno());
        done += k;
      }
    };
    std::thread sender([&] { move(out, sbuf, true); });
    move(in, rbuf, false);
    sender.join();
  };
  for (int64_t bytes : Sizes()) {
    const size_t size = cached ? size_t{4} << 20 : static_cast<size_t>(bytes);
    sbuf.assign(size, 1);
    rbuf.assign(size, 0);
    exchange(bytes);  // warm-up, and a rough barrier (everyone's data arrived)
    const int iters = Iterations(bytes);
    const double t0 = Now();
    for (int i = 0; i < iters; ++i) exchange(bytes);
    const double dt = (Now() - t0) / iters;
    exchange(1);
    if (rank == 0) {
      char line[200];
      int len = std::snprintf(line, sizeof(line), "%lld %.9f %.3f\n", static_cast<long long>(bytes),
                              dt, static_cast<double>(bytes) / dt / 1e9);
      (void)!::write(out_fd, line, len);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: allreduce_bench RANKS [--ceiling | --ceiling-cached | "
      "--algorithm ring|halving-doubling|auto] "
      "[--min-bytes B] [--max-bytes B]\n";
  int n = argc < 2 ? 0 : std::atoi(argv[1]);
  bool ceiling = false, cached = false;
  std::optional<Algorithm> algorithm;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ceiling" || a == "--ceiling-cached") {
      ceiling = true;
      cached = a == "--ceiling-cached";
    } else if (a == "--algorithm" && i + 1 < argc) {
      const std::string name = argv[++i];
      algorithm = ParseAlgorithm(name);
      if (!algorithm.has_value() && name != "auto") n = 0;
    } else if (a == "--max-bytes" && i + 1 < argc) {
      max_bytes = std::atoll(argv[++i]);
    } else if (a == "--min-bytes" && i + 1 < argc) {
      min_bytes = std::atoll(argv[++i]);
    } else {
      n = 0;
    }
  }
  if (n < 1) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  std::vector<int> ports = FreePorts(n);
  std::vector<std::string> addrs;
  for (int p : ports) addrs.push_back("127.0.0.1:" + std::to_string(p));
  int pipefd[2];
  if (::pipe(pipefd) != 0) return 1;
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pipefd[0]);
      if (ceiling) {
        CeilingRank(r, ports, cached, pipefd[1]);
      } else {
        RingRank(r, addrs, algorithm, pipefd[1]);
      }
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  ::close(pipefd[1]);
  if (ceiling) {
    std::printf("# bytes seconds GB/s-per-link (loopback TCP ring, %d ranks)\n", n);
  } else {
    std::printf("# bytes seconds algbw-GB/s busbw-GB/s (%s all-reduce, %d ranks)\n",
                algorithm ? AlgorithmFor(*algorithm).name : "auto", n);
  }
  std::fflush(stdout);
  char buf[4096];
  ssize_t k;
  while ((k = ::read(pipefd[0], buf, sizeof(buf))) > 0) std::fwrite(buf, 1, k, stdout);
  int rc = 0;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    ::waitpid(kids[r], &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "allreduce_bench: rank %d killed by signal %d\n", r, WTERMSIG(status));
    } else {
      std::fprintf(stderr, "allreduce_bench: rank %d exited with status %d\n", r,
                   WEXITSTATUS(status));
    }
    rc = 1;
  }
  return rc;
}
