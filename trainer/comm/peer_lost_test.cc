// The typed peer-lost status: recognised by its payload, not by its message.
#include "trainer/comm/peer_lost.h"

#include "gtest/gtest.h"

namespace lockstep::trainer::comm {
namespace {

TEST(PeerLostTest, MarksTheStatusAndNamesTheLoss) {
  absl::Status s = PeerLostError("worker 2 sent no heartbeat for 31s");
  EXPECT_TRUE(IsPeerLost(s));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "peer lost: worker 2 sent no heartbeat for 31s");
  // A message that names the loss already is not prefixed twice.
  EXPECT_EQ(PeerLostError(s.message()).message(), s.message());
}

TEST(PeerLostTest, TheMessageAloneDoesNotMakeAPeerLoss) {
  // An error that merely reads like one (a user's file named "peer lost") is not one.
  EXPECT_FALSE(IsPeerLost(absl::AbortedError("peer lost: in a file name")));
  EXPECT_FALSE(IsPeerLost(absl::OkStatus()));
  EXPECT_FALSE(IsPeerLost(absl::UnavailableError("connection reset")));
}

TEST(PeerLostTest, AsPeerLostWrapsOnceAndKeepsOk) {
  EXPECT_TRUE(AsPeerLost(absl::OkStatus()).ok());
  absl::Status reset = AsPeerLost(absl::UnavailableError("rank 1's connection reset"));
  EXPECT_TRUE(IsPeerLost(reset));
  EXPECT_EQ(reset.message(), "peer lost: rank 1's connection reset");
  absl::Status again = AsPeerLost(reset);
  EXPECT_EQ(again, reset);
}

}  // namespace
}  // namespace lockstep::trainer::comm
