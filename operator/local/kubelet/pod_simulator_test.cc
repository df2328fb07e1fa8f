// The pod simulator against an in-process API server, on the real clock with short delays.
// Each test follows its pod through a watch, which sees every status the simulator writes, in
// order, so no test depends on catching a state by polling.
#include "operator/local/kubelet/pod_simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "operator/kube/api_error.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/local_transport.h"

namespace lockstep::local {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class PodSimulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep-simulator-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    api_ = ApiServer::Create({.state_dir = dir_.string()}).value();
    client_ = std::make_unique<kube::RestClient>(std::make_shared<LocalTransport>(api_.get()));
  }
  void Start(PodSimulatorOptions options) {
    options.jitter = 0;
    options.seed = 1;
    simulator_ = std::make_unique<PodSimulator>(client_.get(), options, clock_.get());
    thread_ = std::jthread([this](std::stop_token stop) { simulator_->Run(stop); });
  }
  void TearDown() override {
    if (thread_.joinable()) {
      thread_.request_stop();
      thread_.join();
    }
    simulator_.reset();
    fs::remove_all(dir_);
  }

  static json Pod(const std::string& name, const std::string& policy = "Never",
                  json annotations = json::object()) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"annotations", annotations}}},
            {"spec",
             {{"restartPolicy", policy},
              {"containers", {{{"name", "lockstep"}, {"image", "lockstep/trainer:0.1.0"}}}}}}};
  }

  // Creates `pod` and follows it until `done` holds of it (30 s at most); returns each
  // phase it went through, once per run of equal phases, and leaves the last object in `last`.
  std::vector<std::string> Follow(const json& pod, const std::function<bool(const json&)>& done,
                                  json* last) {
    absl::StatusOr<json> created = client_->Create(kube::resources::kPods, "default", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return {};
    return Watch(pod["metadata"]["name"], (*created)["metadata"]["resourceVersion"], done, last);
  }

  std::vector<std::string> Watch(const std::string& name, const std::string& from,
                                 const std::function<bool(const json&)>& done, json* last) {
    std::vector<std::string> phases;
    auto stream = client_->Watch(kube::resources::kPods, "default",
                                 {.field_selector = "metadata.name=" + name,
                                  .resource_version = from,
                                  .timeout_seconds = 30});
    EXPECT_TRUE(stream.ok());
    if (!stream.ok()) return phases;
    while (true) {
      absl::StatusOr<std::optional<kube::WatchEvent>> e = (*stream)->Next();
      if (!e.ok() || !e->has_value()) {
        ADD_FAILURE() << "the watch ended before the pod got where it should";
        return phases;
      }
      if ((*e)->type == kube::WatchEvent::Type::kBookmark) continue;
      *last = (*e)->object;
      std::string phase = last->value("/status/phase"_json_pointer, "");
      if ((*e)->type == kube::WatchEvent::Type::kDeleted) phase = "(deleted)";
      if (phases.empty() || phases.back() != phase) phases.push_back(phase);
      if (done(*last) || (*e)->type == kube::WatchEvent::Type::kDeleted) return phases;
    }
  }

  static std::function<bool(const json&)> PhaseIs(const std::string& phase) {
    return [phase](const json& p) { return p.value("/status/phase"_json_pointer, "") == phase; };
  }
  static json Container(const json& pod) { return pod["status"]["containerStatuses"][0]; }

  fs::path dir_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<common::Clock> clock_ = common::NewRealClock();
  std::unique_ptr<PodSimulator> simulator_;
  std::jthread thread_;
};

TEST_F(PodSimulatorTest, APodIsBoundThenRunsThenSucceedsOnSchedule) {
  Start({.start_delay = absl::Milliseconds(100), .run_time = absl::Milliseconds(100)});
  json pod;
  std::vector<std::string> phases = Follow(Pod("a"), PhaseIs("Succeeded"), &pod);
  EXPECT_THAT(phases, ElementsAre("Pending", "Running", "Succeeded"));
  EXPECT_EQ(pod["spec"]["nodeName"], "lockstep-local");
  EXPECT_THAT(pod["status"]["podIP"].get<std::string>(), ::testing::StartsWith("10."));
  EXPECT_EQ(Container(pod)["state"]["terminated"]["exitCode"], 0);
  EXPECT_EQ(Container(pod)["state"]["terminated"]["reason"], "Completed");
  EXPECT_EQ(Container(pod)["restartCount"], 0);
}

TEST_F(PodSimulatorTest, AnnotationsInjectAFailureWithItsCodeReasonAndMessage) {
  Start({.start_delay = absl::Milliseconds(10)});  // and no run time: only the script ends it
  json pod;
  std::vector<std::string> phases = Follow(Pod("b", "Never",
                                               {{kSimulateExitAfter, "150ms"},
                                                {kSimulateExitCode, "137"},
                                                {kSimulateReason, "OOMKilled"},
                                                {kSimulateMessage, "out of memory"}}),
                                           PhaseIs("Failed"), &pod);
  EXPECT_THAT(phases, ElementsAre("Pending", "Running", "Failed"));
  json terminated = Container(pod)["state"]["terminated"];
  EXPECT_EQ(terminated["exitCode"], 137);
  EXPECT_EQ(terminated["reason"], "OOMKilled");
  EXPECT_EQ(terminated["message"], "out of memory");
  absl::Time started, finished;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, terminated["startedAt"].get<std::string>(),
                              &started, nullptr));
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, terminated["finishedAt"].get<std::string>(),
                              &finished, nullptr));
  EXPECT_GE(finished - started, absl::Seconds(0));  // second resolution: 150 ms may round to 0
}

TEST_F(PodSimulatorTest, AnnotatingARunningPodFailsIt) {
  Start({.start_delay = absl::Milliseconds(10)});
  json pod;
  ASSERT_THAT(Follow(Pod("c"), PhaseIs("Running"), &pod), ElementsAre("Pending", "Running"));
  absl::StatusOr<json> patched = client_->Patch(
      kube::resources::kPods, "default", "c", kube::PatchType::kMerge,
      {{"metadata", {{"annotations", {{kSimulateExitAfter, "0s"}, {kSimulateExitCode, "3"}}}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  std::vector<std::string> phases =
      Watch("c", (*patched)["metadata"]["resourceVersion"], PhaseIs("Failed"), &pod);
  EXPECT_THAT(phases, ElementsAre("Failed"));  // the next status written after the patch
  EXPECT_EQ(Container(pod)["state"]["terminated"]["exitCode"], 3);
  EXPECT_EQ(Container(pod)["state"]["terminated"]["reason"], "Error");
}

TEST_F(PodSimulatorTest, OnFailureRestartsTheContainerAfterABackoff) {
  Start({.start_delay = absl::Milliseconds(10),
         .crash_backoff_initial = absl::Milliseconds(20),
         .crash_backoff_max = absl::Milliseconds(40)});
  json pod;
  std::vector<std::string> phases = Follow(
      Pod("d", "OnFailure", {{kSimulateExitAfter, "20ms"}}),
      [](const json& p) {
        return p.value("/status/containerStatuses/0/restartCount"_json_pointer, 0) >= 3;
      },
      &pod);
  // Never Failed: each crash waits in CrashLoopBackOff (phase Running's container waiting).
  EXPECT_THAT(phases, ::testing::Not(::testing::Contains("Failed")));
  EXPECT_EQ(Container(pod)["lastState"]["terminated"]["exitCode"], 1);
}

TEST_F(PodSimulatorTest, ABadAnnotationIsNamedInTheWaitingMessage) {
  Start({.start_delay = absl::Milliseconds(10)});
  json pod;
  Follow(
      Pod("e", "Never", {{kSimulateExitCode, "lots"}}),
      [](const json& p) {
        return p.value("/status/containerStatuses/0/state/waiting/reason"_json_pointer, "") ==
               "SimulationError";
      },
      &pod);
  EXPECT_EQ(pod["status"]["phase"], "Pending");
  EXPECT_THAT(Container(pod)["state"]["waiting"]["message"].get<std::string>(),
              HasSubstr("lockstep.io/simulate-exit-code: \"lots\" is not an exit code"));
}

TEST_F(PodSimulatorTest, ADeletedPodIsRemovedWithoutWaitingForItsGracePeriod) {
  Start({.start_delay = absl::Milliseconds(10)});
  json pod;
  ASSERT_THAT(Follow(Pod("f"), PhaseIs("Running"), &pod), ElementsAre("Pending", "Running"));
  ASSERT_TRUE(
      client_->Delete(kube::resources::kPods, "default", "f", {.grace_period_seconds = 3600}).ok());
  std::vector<std::string> phases = Watch(
      "f", pod["metadata"]["resourceVersion"], [](const json&) { return false; }, &pod);
  EXPECT_EQ(phases.back(), "(deleted)");
  EXPECT_TRUE(kube::IsApiNotFound(client_->Get(kube::resources::kPods, "default", "f").status()));
}

}  // namespace
}  // namespace lockstep::local
