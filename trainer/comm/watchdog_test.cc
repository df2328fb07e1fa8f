#include "trainer/comm/watchdog.h"

#include "trainer/comm/nccl.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

namespace lockstep::trainer::comm {
namespace {

TEST(Watchdog, FiresOnceWithTheFirstFailure) {
  std::atomic<int> checks{0};
  std::promise<absl::Status> fired;
  std::atomic<int> calls{0};
  Watchdog w(
      absl::Milliseconds(1),
      [&] {
        // Healthy for a few checks, then an asynchronous error, then another.
        int n = ++checks;
        if (n < 5) return absl::OkStatus();
        return n == 5 ? absl::UnavailableError("remote error") : absl::InternalError("later");
      },
      [&](absl::Status s) {
        if (calls++ == 0) fired.set_value(s);
      });
  absl::Status s = fired.get_future().get();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  ASSERT_TRUE(w.fired().has_value());
  EXPECT_EQ(*w.fired(), s);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(checks.load(), 5);  // it stops checking once it fired
}

TEST(Watchdog, StopsQuietlyWhileHealthy) {
  std::atomic<int> checks{0};
  std::atomic<bool> failed{false};
  {
    Watchdog w(
        absl::Milliseconds(1),
        [&] {
          ++checks;
          return absl::OkStatus();
        },
        [&](absl::Status) { failed = true; });
    while (checks.load() < 3) std::this_thread::yield();
    EXPECT_FALSE(w.fired().has_value());
  }
  EXPECT_FALSE(failed.load());
}

TEST(DeadlineTracker, FailsOnceTheOldestOperationOverstays) {
  DeadlineTracker t(absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(t.Check(t0).ok());  // nothing in flight
  t.Begin("all-reduce #1 (1000 floats)", t0);
  t.Begin("all-reduce #2 (4 floats)", t0 + absl::Seconds(8));
  EXPECT_TRUE(t.Check(t0 + absl::Seconds(10)).ok());
  absl::Status late = t.Check(t0 + absl::Seconds(11));
  EXPECT_TRUE(absl::IsDeadlineExceeded(late));
  EXPECT_NE(late.message().find("all-reduce #1"), std::string::npos) << late;
  // The first completes: the second is judged from its own start.
  t.End();
  EXPECT_EQ(t.in_flight(), 1u);
  EXPECT_TRUE(t.Check(t0 + absl::Seconds(17)).ok());
  EXPECT_FALSE(t.Check(t0 + absl::Seconds(19)).ok());
  t.End();
  t.End();  // more Ends than Begins are harmless
  EXPECT_TRUE(t.Check(t0 + absl::Hours(1)).ok());
}

TEST(NcclUniqueId, RoundTripsThroughHexAndRejectsMalformedText) {
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 37 + 11);
  const std::string text = EncodeUniqueId(id);
  EXPECT_EQ(text.size(), 256u);
  EXPECT_EQ(text.find_first_not_of("0123456789abcdef"), std::string::npos);
  absl::StatusOr<std::string> back = DecodeUniqueId(text, 128);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, id);
  EXPECT_FALSE(DecodeUniqueId(text.substr(2), 128).ok());
  std::string bad = text;
  bad[7] = 'g';
  absl::StatusOr<std::string> r = DecodeUniqueId(bad, 128);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
}

TEST(NcclBackend, ConstructorsSayWhyWithoutCudaOrAGpu) {
  if (NcclBuilt()) GTEST_SKIP() << "NCCL is built in; the GPU tests exercise it";
  absl::StatusOr<std::vector<std::unique_ptr<Collective>>> g =
      MakeLocalNcclGroup(1, absl::Seconds(1));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(absl::IsUnimplemented(g.status())) << g.status();
}

}  // namespace
}  // namespace lockstep::trainer::comm
