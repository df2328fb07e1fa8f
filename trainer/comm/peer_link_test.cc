// Peer links and the byte pump without a collective on top: who dials whom, which connection
// a unit takes, the token
// handshake, and the rule that a link ending fails an operation only while this rank still
// has something to move on it.
#include "trainer/comm/peer_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <future>

#include "gtest/gtest.h"
#include "trainer/comm/exchange.h"

namespace lockstep::trainer::comm {
namespace {

// Every rank of n linked with every other; links[r][q] is r's link to q.
std::vector<std::vector<std::unique_ptr<PeerLink>>> Mesh(int n) {
  std::vector<std::unique_ptr<LinkListener>> listeners;
  LinkOptions o;
  o.token = "secret";
  o.connect_timeout = absl::Seconds(30);
  for (int r = 0; r < n; ++r) {
    listeners.push_back(std::move(*LinkListener::Bind("127.0.0.1", 0)));
    o.addresses.push_back("127.0.0.1:" + std::to_string(listeners.back()->port()));
  }
  std::vector<std::future<absl::StatusOr<std::vector<std::unique_ptr<PeerLink>>>>> f;
  for (int r = 0; r < n; ++r) {
    std::vector<int> peers;
    for (int q = 0; q < n; ++q) {
      if (q != r) peers.push_back(q);
    }
    LinkOptions mine = o;
    mine.rank = r;
    f.push_back(std::async(std::launch::async, [&, r, mine, peers] {
      return ConnectPeers(*listeners[r], mine, peers);
    }));
  }
  std::vector<std::vector<std::unique_ptr<PeerLink>>> out;
  for (auto& x : f) {
    auto links = x.get();
    EXPECT_TRUE(links.ok()) << links.status();
    out.push_back(links.ok() ? std::move(*links) : std::vector<std::unique_ptr<PeerLink>>());
  }
  return out;
}

absl::Status NotAborted() { return absl::OkStatus(); }

TEST(PeerLinkTest, OfEachPairExactlyOneDialsAndOnARingThatIsTheRankBefore) {
  for (int n : {2, 3, 4, 5, 8}) {
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        if (a != b) {
          EXPECT_NE(Dials(n, a, b), Dials(n, b, a)) << n << ": " << a << ", " << b;
        }
      }
      if (n > 2) {
        EXPECT_TRUE(Dials(n, a, (a + 1) % n));
      }
    }
  }
}

int LocalPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? ntohs(a.sin_port) : -1;
}
int RemotePort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  return ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? ntohs(a.sin_port) : -1;
}

TEST(PeerLinkTest, LargeUnitsTakeAConnectionPerDirectionSmallOnesShareOne) {
  auto mesh = Mesh(3);
  ASSERT_EQ(mesh.size(), 3u);
  const size_t large = PeerLink::kSplitBytes, small = PeerLink::kSplitBytes - 1;
  for (int r = 0; r < 3; ++r) {
    for (int q = 0; q < 3; ++q) {
      if (q == r) {
        EXPECT_EQ(mesh[r][q], nullptr);
        continue;
      }
      const PeerLink& mine = *mesh[r][q];
      const PeerLink& theirs = *mesh[q][r];
      EXPECT_EQ(mine.peer(), q);
      EXPECT_NE(mine.SendFd(large), mine.RecvFd(large));
      EXPECT_EQ(mine.SendFd(small), mine.RecvFd(small));
      // What r sends on is the connection q receives on, for either size.
      for (size_t bytes : {small, large}) {
        EXPECT_EQ(LocalPort(mine.SendFd(bytes)), RemotePort(theirs.RecvFd(bytes)))
            << r << " -> " << q << ", " << bytes << " bytes";
        EXPECT_EQ(LocalPort(theirs.SendFd(bytes)), RemotePort(mine.RecvFd(bytes)))
            << q << " -> " << r << ", " << bytes << " bytes";
      }
    }
  }
}

TEST(PeerLinkTest, LinksCarryBytesBothWays) {
  // Units under and over kSplitBytes: on the shared connection and one per direction.
  for (size_t floats : {size_t{3}, PeerLink::kSplitBytes}) {
    auto mesh = Mesh(2);
    ASSERT_EQ(mesh.size(), 2u);
    std::vector<float> a(floats), b(floats);
    for (size_t i = 0; i < floats; ++i) {
      a[i] = static_cast<float>(i % 1000);
      b[i] = static_cast<float>(10 * (i % 7));
    }
    std::vector<float> sum(floats);
    for (size_t i = 0; i < floats; ++i) sum[i] = a[i] + b[i];
    auto run = [&](int r, std::vector<float>& mine) {
      Exchanger x(r, std::move(mesh[r]), absl::Seconds(30));
      // Receive the other's buffer and add it into ours, while sending ours (before the add).
      std::vector<float> copy = mine;
      const size_t bytes = floats * sizeof(float);
      return x.Run({{1 - r, reinterpret_cast<const char*>(copy.data()), bytes, 0}},
                   {{1 - r, nullptr, bytes, mine.data()}}, NotAborted);
    };
    auto other = std::async(std::launch::async, [&] { return run(1, b); });
    ASSERT_TRUE(run(0, a).ok());
    ASSERT_TRUE(other.get().ok());
    EXPECT_EQ(a, sum) << floats << " floats";
    EXPECT_EQ(b, sum) << floats << " floats";
  }
}

TEST(PeerLinkTest, APeerThatLeavesAfterItsPartIsDoneFailsNothing) {
  // Rank 1 has sent everything to rank 0 and left; rank 0 still receives from rank 2. The
  // fault this guards against: rank 0 saw rank 1's link end and failed its operation.
  auto mesh = Mesh(3);
  ASSERT_EQ(mesh.size(), 3u);
  mesh[1].clear();  // rank 1 leaves
  float x = 5, y = 0;
  Exchanger two(2, std::move(mesh[2]), absl::Seconds(30));
  ASSERT_TRUE(two.Run({{0, reinterpret_cast<const char*>(&x), 4, 0}}, {}, NotAborted).ok());
  Exchanger zero(0, std::move(mesh[0]), absl::Seconds(30));
  ASSERT_TRUE(zero.Run({}, {{2, reinterpret_cast<char*>(&y), 4}}, NotAborted).ok());
  EXPECT_EQ(y, 5);
}

TEST(PeerLinkTest, APeerThatLeavesWhileOwedBytesFailsTheOperationAtOnce) {
  auto mesh = Mesh(3);
  ASSERT_EQ(mesh.size(), 3u);
  mesh[1].clear();  // rank 1 leaves, but rank 0 still has to send to it after a receive
  float x = 5, y = 0;
  Exchanger zero(0, std::move(mesh[0]), absl::Hours(1));
  // The receive from rank 2 never comes: only the watch on rank 1's link ends this.
  absl::Status s = zero.Run({{1, reinterpret_cast<const char*>(&x), 4, 1}},
                            {{2, reinterpret_cast<char*>(&y), 4}}, NotAborted);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
  EXPECT_NE(s.message().find("the peer is gone"), std::string::npos) << s;
}

TEST(PeerLinkTest, InterruptEndsARunningOperationWithTheAbortStatus) {
  auto mesh = Mesh(2);
  ASSERT_EQ(mesh.size(), 2u);
  Exchanger zero(0, std::move(mesh[0]), absl::Hours(1));
  float y = 0;
  zero.Interrupt();  // before Run: Run sees it at once
  absl::Status s = zero.Run({}, {{1, reinterpret_cast<char*>(&y), 4}},
                            [] { return absl::AbortedError("stop"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

}  // namespace
}  // namespace lockstep::trainer::comm
