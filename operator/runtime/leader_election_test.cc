#include "operator/runtime/leader_election.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <stdexcept>
#include <thread>

#include "common/testing/fake_clock.h"
#include "operator/runtime/testing/fake_object_server.h"

namespace lockstep::runtime {
namespace {

constexpr char kLeasePath[] = "/apis/coordination.k8s.io/v1/namespaces/sys/leases/lockstep";

class LeaderElectionTest : public ::testing::Test {
 protected:
  LeaderElectionConfig Config(const std::string& id) {
    return {.namespace_ = "sys", .name = "lockstep", .identity = id};
  }
  nlohmann::json Spec() { return server_.Get(kLeasePath).value()["spec"]; }

  std::shared_ptr<kube::FakeTransport> transport_ = std::make_shared<kube::FakeTransport>();
  testing::FakeObjectServer server_{transport_.get()};
  kube::RestClient client_{transport_};
  common::FakeClock clock_;
  LeaderElector a_{&client_, Config("a"), &clock_};
  LeaderElector b_{&client_, Config("b"), &clock_};
};

TEST_F(LeaderElectionTest, FirstCandidateCreatesTheLease) {
  EXPECT_EQ(a_.TryAcquireOrRenew().value(), true);
  EXPECT_TRUE(a_.IsLeader());
  EXPECT_EQ(Spec()["holderIdentity"], "a");
  EXPECT_EQ(Spec()["leaseTransitions"], 0);
  EXPECT_EQ(Spec()["leaseDurationSeconds"], 15);
  EXPECT_EQ(b_.TryAcquireOrRenew().value(), false);
  EXPECT_EQ(b_.observed_holder(), "a");
}

TEST_F(LeaderElectionTest, RenewalsKeepTheLeaseAndTheAcquireTime) {
  ASSERT_TRUE(a_.TryAcquireOrRenew().value());
  std::string acquired = Spec()["acquireTime"];
  for (int i = 0; i < 20; ++i) {  // 40 s of renewals, far past one lease duration
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(a_.TryAcquireOrRenew().value());
    ASSERT_FALSE(b_.TryAcquireOrRenew().value()) << "at " << 2 * (i + 1) << " s";
  }
  EXPECT_EQ(Spec()["acquireTime"], acquired);
  EXPECT_NE(Spec()["renewTime"], acquired);
  EXPECT_EQ(Spec()["leaseTransitions"], 0);
}

TEST_F(LeaderElectionTest, HandOverAfterTheLeaderStopsRenewing) {
  ASSERT_TRUE(a_.TryAcquireOrRenew().value());
  ASSERT_FALSE(b_.TryAcquireOrRenew().value());  // b first sees the record now
  clock_.Advance(absl::Seconds(14));
  EXPECT_FALSE(b_.TryAcquireOrRenew().value());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(b_.TryAcquireOrRenew().value());
  EXPECT_EQ(Spec()["holderIdentity"], "b");
  EXPECT_EQ(Spec()["leaseTransitions"], 1);
  EXPECT_FALSE(a_.TryAcquireOrRenew().value());  // the old leader learns it lost
  EXPECT_FALSE(a_.IsLeader());
}

TEST_F(LeaderElectionTest, ExpiryIsJudgedByLocalMonotonicTimeNotTheRecordedRenewTime) {
  ASSERT_TRUE(a_.TryAcquireOrRenew().value());
  // A holder whose renewTime looks ancient to us (skewed clocks) still gets a full lease
  // duration from the moment we first saw its record.
  nlohmann::json lease = server_.Get(kLeasePath).value();
  lease["spec"]["holderIdentity"] = "skewed";
  lease["spec"]["renewTime"] = "1970-01-01T00:00:00.000000Z";
  kube::RestClient(transport_).Update(kube::resources::kLeases, "sys", lease).value();
  EXPECT_FALSE(b_.TryAcquireOrRenew().value());
  clock_.Advance(absl::Seconds(14));
  EXPECT_FALSE(b_.TryAcquireOrRenew().value());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(b_.TryAcquireOrRenew().value());
}

TEST_F(LeaderElectionTest, ReleaseLetsASuccessorTakeOverAtOnce) {
  ASSERT_TRUE(a_.TryAcquireOrRenew().value());
  ASSERT_FALSE(b_.TryAcquireOrRenew().value());
  ASSERT_TRUE(a_.Release().ok());
  EXPECT_EQ(Spec()["holderIdentity"], "");
  EXPECT_TRUE(b_.TryAcquireOrRenew().value());
  EXPECT_EQ(Spec()["leaseTransitions"], 1);
}

TEST_F(LeaderElectionTest, OfTwoRacingCandidatesExactlyOneWins) {
  ASSERT_TRUE(a_.TryAcquireOrRenew().value());
  ASSERT_TRUE(a_.Release().ok());
  LeaderElector c(&client_, Config("c"), &clock_);
  // b reads the free lease; before its write lands, c takes it.
  std::optional<bool> c_won;
  server_.BeforeNextPut([&] { c_won = c.TryAcquireOrRenew().value(); });
  EXPECT_FALSE(b_.TryAcquireOrRenew().value());  // 409 Conflict
  EXPECT_EQ(c_won, true);
  EXPECT_EQ(Spec()["holderIdentity"], "c");
}

TEST_F(LeaderElectionTest, ServerErrorsAreStatusesNotLeadership) {
  server_.set_down(true);
  absl::StatusOr<bool> r = a_.TryAcquireOrRenew();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(a_.IsLeader());
}

TEST_F(LeaderElectionTest, RunStopsLeadingWhenRenewalsFailPastTheDeadline) {
  std::mutex mu;
  std::condition_variable cv;
  bool leading = false;
  bool lead_returned = false;
  std::jthread run([&] {
    EXPECT_TRUE(a_.Run({}, [&](std::stop_token stop) {
      {
        std::lock_guard lock(mu);
        leading = true;
      }
      cv.notify_all();
      std::condition_variable_any wait;
      std::unique_lock lock(mu);
      wait.wait(lock, stop, [] { return false; });
      lead_returned = true;
    }));
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return leading; });
  }
  server_.set_down(true);
  // Renewals every 2 s fail; at 10 s the renew deadline has passed.
  for (int i = 0; i < 5; ++i) {
    clock_.WaitForTimers(1);
    clock_.Advance(absl::Seconds(2));
  }
  run.join();
  EXPECT_TRUE(lead_returned);
  EXPECT_FALSE(a_.IsLeader());
}

TEST_F(LeaderElectionTest, RunReleasesTheLeaseOnShutdown) {
  std::stop_source stop;
  std::jthread run([&] {
    a_.Run(stop.get_token(), [&](std::stop_token leader) {
      stop.request_stop();  // shut down as soon as we lead
      std::condition_variable_any wait;
      std::mutex m;
      std::unique_lock lock(m);
      wait.wait(lock, leader, [] { return false; });
    });
  });
  run.join();
  EXPECT_EQ(Spec()["holderIdentity"], "");
}

TEST_F(LeaderElectionTest, WorkThatThrowsEndsLeadingAndReleases) {
  EXPECT_TRUE(a_.Run({}, [](std::stop_token) { throw std::runtime_error("controller bug"); }));
  EXPECT_EQ(Spec()["holderIdentity"], "");
  EXPECT_FALSE(a_.IsLeader());
}

TEST_F(LeaderElectionTest, CampaignRetriesEveryRetryPeriodUntilTheLeaseIsFree) {
  ASSERT_TRUE(b_.TryAcquireOrRenew().value());
  std::atomic<bool> led{false};
  std::stop_source stop;
  std::jthread run([&] {
    a_.Run(stop.get_token(), [&](std::stop_token) {
      led = true;
      stop.request_stop();
    });
  });
  clock_.WaitForTimers(1);  // a tried, lost, and sleeps
  EXPECT_FALSE(led);
  ASSERT_TRUE(b_.Release().ok());
  clock_.Advance(absl::Seconds(2));
  run.join();
  EXPECT_TRUE(led);
}

}  // namespace
}  // namespace lockstep::runtime
