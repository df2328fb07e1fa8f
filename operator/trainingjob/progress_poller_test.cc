#include "operator/trainingjob/progress_poller.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "common/testing/fake_clock.h"
#include "operator/api/job_state.h"
#include "operator/trainingjob/observe.h"
#include "operator/trainingjob/progress_target.h"
#include "operator/trainingjob/testing.h"

namespace lockstep::trainingjob {
namespace {

using api::ReplicaType;
using testing::MakePod;

// Answers from a table by pod IP; an IP in `blocked` waits until Release() (a hung chief).
class FakeSource final : public ProgressSource {
 public:
  absl::StatusOr<api::Progress> Fetch(const std::string& ip, int32_t port) override {
    std::unique_lock lock(mu_);
    fetched_.push_back(ip + ":" + std::to_string(port));
    cv_.notify_all();
    cv_.wait(lock, [&] { return !blocked_.contains(ip); });
    auto it = answers_.find(ip);
    if (it == answers_.end()) return absl::UnavailableError("connection refused");
    return it->second;
  }
  void Answer(const std::string& ip, absl::StatusOr<api::Progress> p) {
    std::lock_guard lock(mu_);
    answers_.insert_or_assign(ip, std::move(p));
  }
  void Block(const std::string& ip) {
    std::lock_guard lock(mu_);
    blocked_.insert(ip);
  }
  void Release(const std::string& ip) {
    std::lock_guard lock(mu_);
    blocked_.erase(ip);
    cv_.notify_all();
  }
  // Blocks until `ip` has been asked at least `n` times in all.
  void WaitFetched(const std::string& ip, int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return Count(ip) >= n; });
  }
  std::vector<std::string> TakeFetched() {
    std::lock_guard lock(mu_);
    return std::exchange(fetched_, {});
  }

 private:
  int Count(const std::string& ip) const {
    int n = 0;
    for (const std::string& f : fetched_) n += f.starts_with(ip + ":") ? 1 : 0;
    return n;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, absl::StatusOr<api::Progress>> answers_;
  std::set<std::string> blocked_;
  std::vector<std::string> fetched_;
};

class ProgressPollerTest : public ::testing::Test {
 protected:
  ProgressPoller& Poller(ProgressPollerOptions options = {.interval = absl::Seconds(10)}) {
    poller_ = std::make_unique<ProgressPoller>(
        &source_, &clock_, options,
        [this] {
          std::lock_guard lock(mu_);
          return targets_;
        },
        [this](const std::string& key) {
          std::lock_guard lock(mu_);
          changed_.push_back(key);
        });
    return *poller_;
  }
  void SetTargets(std::vector<ProgressTarget> t) {
    std::lock_guard lock(mu_);
    targets_ = std::move(t);
  }
  std::vector<std::string> TakeChanged() {
    std::lock_guard lock(mu_);
    return std::exchange(changed_, {});
  }

  common::FakeClock clock_;
  FakeSource source_;
  std::mutex mu_;
  std::vector<ProgressTarget> targets_;
  std::vector<std::string> changed_;
  std::unique_ptr<ProgressPoller> poller_;
};

using Strings = std::vector<std::string>;

TEST_F(ProgressPollerTest, PollsANewTargetAtOnceAndThenEveryInterval) {
  ProgressPoller& p = Poller();
  SetTargets({{.job_key = "ns/a", .pod_uid = "u1", .pod_ip = "10.0.0.1", .port = 9464}});
  source_.Answer("10.0.0.1", api::Progress{.step = 5});
  p.PollDue();
  EXPECT_EQ(source_.TakeFetched(), Strings{"10.0.0.1:9464"});
  EXPECT_EQ(TakeChanged(), Strings{"ns/a"});
  EXPECT_EQ(p.Latest("ns/a")->step, 5);

  clock_.Advance(absl::Seconds(9));
  p.PollDue();
  EXPECT_TRUE(source_.TakeFetched().empty()) << "polled before the interval passed";

  clock_.Advance(absl::Seconds(1));
  p.PollDue();
  EXPECT_EQ(source_.TakeFetched(), Strings{"10.0.0.1:9464"});
  EXPECT_TRUE(TakeChanged().empty()) << "the same progress is no change";

  source_.Answer("10.0.0.1", api::Progress{.step = 6});
  clock_.Advance(absl::Seconds(10));
  p.PollDue();
  EXPECT_EQ(TakeChanged(), Strings{"ns/a"});
  EXPECT_EQ(p.Latest("ns/a")->step, 6);
}

TEST_F(ProgressPollerTest, AFailedPollKeepsTheLastProgressAndRecordsTheError) {
  ProgressPoller& p = Poller();
  SetTargets({{.job_key = "ns/a", .pod_uid = "u1", .pod_ip = "10.0.0.1"}});
  source_.Answer("10.0.0.1", api::Progress{.step = 5});
  p.PollDue();
  TakeChanged();
  source_.Answer("10.0.0.1", absl::DeadlineExceededError("timed out"));
  clock_.Advance(absl::Seconds(10));
  p.PollDue();
  EXPECT_TRUE(TakeChanged().empty());
  std::optional<ProgressReading> r = p.Reading("ns/a");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r->progress->step, 5);
  EXPECT_EQ(r->polled_at, clock_.Monotonic());
}

TEST_F(ProgressPollerTest, AJobNoLongerListedIsDroppedAndAReplacedPodIsPolledAtOnce) {
  ProgressPoller& p = Poller();
  SetTargets({{.job_key = "ns/a", .pod_uid = "u1", .pod_ip = "10.0.0.1"},
              {.job_key = "ns/b", .pod_uid = "u2", .pod_ip = "10.0.0.2"}});
  source_.Answer("10.0.0.1", api::Progress{.step = 1});
  source_.Answer("10.0.0.2", api::Progress{.step = 2});
  p.PollDue();
  EXPECT_EQ(source_.TakeFetched().size(), 2u);

  // Job a's chief is replaced (new uid and address) within the interval; job b stops running.
  SetTargets({{.job_key = "ns/a", .pod_uid = "u3", .pod_ip = "10.0.0.3"}});
  source_.Answer("10.0.0.3", api::Progress{.step = 1});
  clock_.Advance(absl::Seconds(1));
  p.PollDue();
  EXPECT_EQ(source_.TakeFetched(), Strings{"10.0.0.3:9464"});
  EXPECT_FALSE(p.Latest("ns/b").has_value());
  EXPECT_EQ(p.Latest("ns/a")->step, 1);
}

TEST_F(ProgressPollerTest, AnUnreachableChiefDoesNotHoldUpTheOthers) {
  ProgressPoller& p = Poller({.interval = absl::Seconds(10), .threads = 2});
  SetTargets({{.job_key = "ns/a", .pod_uid = "u1", .pod_ip = "10.0.0.1"},
              {.job_key = "ns/b", .pod_uid = "u2", .pod_ip = "10.0.0.2"}});
  source_.Block("10.0.0.1");
  source_.Answer("10.0.0.2", api::Progress{.step = 2});
  std::stop_source stop;
  std::jthread run([&] { p.Run(stop.get_token()); });
  source_.WaitFetched("10.0.0.1", 1);
  // Job b is polled again every interval while job a's fetch still hangs.
  for (int round = 1; round <= 3; ++round) {
    source_.WaitFetched("10.0.0.2", round);
    clock_.WaitForTimerWithin(absl::Seconds(10));
    clock_.Advance(absl::Seconds(10));
  }
  EXPECT_EQ(p.Latest("ns/b")->step, 2);
  EXPECT_FALSE(p.Latest("ns/a").has_value());
  stop.request_stop();
  source_.Release("10.0.0.1");
}

TEST_F(ProgressPollerTest, WakeMakesASleepingPollerSeeANewTarget) {
  ProgressPoller& p = Poller({.interval = absl::Seconds(10), .threads = 1});
  std::stop_source stop;
  std::jthread run([&] { p.Run(stop.get_token()); });
  clock_.WaitForTimers(1);  // asleep with nothing to poll
  SetTargets({{.job_key = "ns/a", .pod_uid = "u1", .pod_ip = "10.0.0.1"}});
  source_.Answer("10.0.0.1", api::Progress{.step = 3});
  p.Wake();
  source_.WaitFetched("10.0.0.1", 1);
  stop.request_stop();
}

std::optional<ProgressTarget> TargetOf(const api::TrainingJob& job, const ObservedPod* pod) {
  return ProgressTargetOf(ObserveChildMeta(job.metadata),
                          job.status ? job.status->state : api::JobState::kPending,
                          ProgressSpeakerOf(job), pod);
}

TEST(ProgressTargetTest, TheChiefElseWorkerZeroWhileTheJobRuns) {
  nlohmann::json metrics_port = {
      {"replicaSpecs",
       {{"Chief",
         {{"template",
           {{"spec",
             {{"containers",
               {{{"name", "tensorflow"},
                 {"image", "lockstep/trainer:latest"},
                 {"ports", {{{"name", "lockstep-metrics"}, {"containerPort", 9000}}}}}}}}}}}}}}}};
  api::TrainingJob job =
      testing::Job("ParameterServer", {{"Chief"}, {"Worker", 2}, {"PS"}}, metrics_port);
  job.status = api::TrainingJobStatus{.state = api::JobState::kRunning};
  EXPECT_EQ(ProgressPodName(job.metadata.name, ProgressSpeakerOf(job)), "t-chief-0");
  ObservedPod chief = MakePod(job, ReplicaType::kChief, 0, 0, PodPhase::kRunning);
  std::optional<ProgressTarget> t = TargetOf(job, &chief);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->job_key, "ns/t");
  EXPECT_EQ(t->pod_uid, chief.metadata.uid());
  EXPECT_EQ(t->pod_ip, chief.pod_ip);
  EXPECT_EQ(t->port, 9000);

  api::TrainingJob no_chief = testing::Job("MultiWorkerMirrored", {{"Worker", 2}});
  no_chief.status = api::TrainingJobStatus{.state = api::JobState::kRestarting};
  EXPECT_EQ(ProgressPodName(no_chief.metadata.name, ProgressSpeakerOf(no_chief)), "t-worker-0");
  ObservedPod w0 = MakePod(no_chief, ReplicaType::kWorker, 0, 0, PodPhase::kRunning);
  ASSERT_TRUE(TargetOf(no_chief, &w0).has_value());
  EXPECT_EQ(TargetOf(no_chief, &w0)->port, api::kDefaultMetricsPort);

  ObservedPod pending = MakePod(job, ReplicaType::kChief, 0, 0, PodPhase::kPending);
  ObservedPod no_ip = chief;
  no_ip.pod_ip.clear();
  ObservedPod not_ours = chief;
  ChildMeta::Strings other = chief.metadata.strings();
  other.controller_uid = "another-job-uid";
  not_ours.metadata.Set(other);
  ObservedPod worker1 = MakePod(job, ReplicaType::kWorker, 1, 0, PodPhase::kRunning);
  EXPECT_FALSE(TargetOf(job, nullptr).has_value());
  EXPECT_FALSE(TargetOf(job, &pending).has_value());
  EXPECT_FALSE(TargetOf(job, &no_ip).has_value());
  EXPECT_FALSE(TargetOf(job, &not_ours).has_value());
  EXPECT_FALSE(TargetOf(job, &worker1).has_value());
  for (api::JobState s : {api::JobState::kPending, api::JobState::kCreated,
                          api::JobState::kSucceeded, api::JobState::kFailed}) {
    job.status->state = s;
    EXPECT_FALSE(TargetOf(job, &chief).has_value());
  }
}

}  // namespace
}  // namespace lockstep::trainingjob
