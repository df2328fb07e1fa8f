// The client-side token bucket (client-go's flowcontrol), on a fake clock.
#include "operator/kube/rate_limiter.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/testing/fake_clock.h"

namespace lockstep::kube {
namespace {

TEST(TokenBucketTest, BurstThenSteadyRate) {
  common::FakeClock clock;
  TokenBucket bucket(/*qps=*/5, /*burst=*/3, &clock);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(200));
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(400));  // queued behind the previous one
  EXPECT_FALSE(bucket.TryAccept());
  clock.Advance(absl::Seconds(1));  // refills 5 tokens, 2 of them owed
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_TRUE(bucket.TryAccept());
  EXPECT_FALSE(bucket.TryAccept());
  clock.Advance(absl::Hours(1));  // never more than the burst
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(bucket.TryAccept());
  EXPECT_FALSE(bucket.TryAccept());
}

// The time a thread waits for tokens is its own: a reconcile tells it apart from its work.
TEST(TokenBucketTest, EachThreadKnowsHowLongItWaited) {
  common::FakeClock clock;
  TokenBucket bucket(/*qps=*/10, /*burst=*/1, &clock);
  absl::Duration waited;
  std::thread t([&] {
    EXPECT_TRUE(bucket.Wait());  // the burst
    EXPECT_TRUE(bucket.Wait());  // 100 ms
    waited = TokenBucket::WaitedOnThisThread();
  });
  clock.WaitForTimers(1);
  clock.Advance(absl::Milliseconds(100));
  t.join();
  EXPECT_EQ(waited, absl::Milliseconds(100));
  EXPECT_EQ(TokenBucket::WaitedOnThisThread(), absl::ZeroDuration());
}

TEST(TokenBucketTest, ZeroQpsNeverThrottles) {
  common::FakeClock clock;
  TokenBucket bucket(0, 1, &clock);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(bucket.TryAccept());
}

}  // namespace
}  // namespace lockstep::kube
