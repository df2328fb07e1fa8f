// The runner with real processes, against an in-process API server.
#include "operator/local/kubelet/runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "operator/kube/api_error.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/local_transport.h"
#include "operator/local/testing/silent_watch.h"

namespace lockstep::local {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Processes whose process group is `pgid`.
int CountGroup(pid_t pgid) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != "Z") ++n;
  }
  return n;
}

// Waits until no process of group `pgid` is left (60 s at most); returns how many are. A
// process signalled to death leaves when the kernel has run its exit, which under load can
// come well after the runner saw the pod's main process end and removed the pod. An exited
// process its new parent has not reaped yet (a zombie) counts as gone: kill(-pgid, 0) would
// still find it, for as long as init takes to reap it.
int AwaitEmptyGroup(pid_t pgid) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int n = CountGroup(pgid);
  while (n > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    n = CountGroup(pgid);
  }
  return n;
}

// Whether this process may make a private mount namespace (root, usually).
bool CanUnshareMounts() {
  pid_t pid = fork();
  if (pid == 0) _exit(::unshare(CLONE_NEWNS) == 0 ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A stand-in for the trainer binary: prints its arguments and working directory.
    trainer_ = fs::temp_directory_path() / ("lockstep-fake-trainer-" + std::to_string(::getpid()));
    std::ofstream(trainer_) << "#!/bin/sh\necho \"trainer $* in $(pwd)\"\n";
    fs::permissions(trainer_,
                    fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
    dir_ = fs::temp_directory_path() /
           ("lockstep-runner-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    api_ = ApiServer::Create({.state_dir = dir_.string()}).value();
    client_ = std::make_unique<kube::RestClient>(std::make_shared<LocalTransport>(api_.get()));
    runner_ = std::make_unique<Runner>(
        client_.get(),
        RunnerOptions{.state_dir = dir_.string(),
                      .trainer_binary = trainer_.string(),
                      .operator_binary = trainer_.string(),
                      .api_server_url = "http://127.0.0.1:6443",
                      .service_account_token =
                          [this](const std::string& ns, const std::string& name) {
                            return api_->IssueServiceAccountToken(ns, name);
                          },
                      .tick = absl::Milliseconds(20),
                      .crash_backoff_initial = absl::Milliseconds(50)},
        clock_.get());
    thread_ = std::jthread([this](std::stop_token stop) { runner_->Run(stop); });
  }
  void TearDown() override {
    if (thread_.joinable()) {
      thread_.request_stop();
      thread_.join();
    }
    runner_.reset();
    fs::remove_all(dir_);
    fs::remove(trainer_);
  }

  json Pod(const std::string& name, const std::string& script,
           const std::string& policy = "Never") {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"labels", {{"app", name}}}}},
            {"spec",
             {{"restartPolicy", policy},
              {"terminationGracePeriodSeconds", 1},
              {"containers",
               {{{"name", "main"}, {"image", "debian"}, {"command", {"sh", "-c", script}}}}}}}};
  }
  void Create(const json& obj, const kube::Resource& r = kube::resources::kPods) {
    ASSERT_TRUE(client_->Create(r, "default", obj).ok());
  }
  // Polls the pod until `pred` holds (60 s at most); returns the last state seen.
  json Await(const std::string& name, const std::function<bool(const json&)>& pred) {
    json last;
    for (int i = 0; i < 3000; ++i) {
      absl::StatusOr<json> pod = client_->Get(kube::resources::kPods, "default", name);
      last = pod.ok() ? *pod : json(nullptr);
      if (pred(last)) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "condition never held for pod " << name << "; last: " << last.dump();
    return last;
  }
  static bool Phase(const json& pod, const std::string& phase) {
    return pod.is_object() && pod.contains("status") && pod["status"].value("phase", "") == phase;
  }
  // A running pod whose script starts with `echo $$$$` (the kubelet makes `$$` of `$$$$`): its
  // process group, read from its log.
  pid_t ProcessGroupOf(const std::string& name) {
    Await(name, [](const json& p) { return Phase(p, "Running"); });
    std::string log;
    for (int i = 0; i < 3000 && log.empty(); ++i) {
      log = Logs(name);
      if (log.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::atoi(log.c_str());
  }
  std::string Logs(const std::string& name) {
    ApiResponse r =
        api_->Handle({.method = "GET", .path = "/api/v1/namespaces/default/pods/" + name + "/log"});
    return r.status == 200 ? r.body : "";
  }

  fs::path dir_;
  fs::path trainer_;
  std::unique_ptr<common::Clock> clock_ = common::NewRealClock();
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<Runner> runner_;
  std::jthread thread_;
};

TEST_F(RunnerTest, ExitCodeReasonTerminationMessageAndLogs) {
  Create(Pod("fail",
             "echo started; echo '{\"reason\":\"PeerLost\"}' > $LOCKSTEP_TERMINATION_LOG; exit 3"));
  json pod = Await("fail", [](const json& p) { return Phase(p, "Failed"); });
  const json& state = pod["status"]["containerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(state["exitCode"], 3);
  EXPECT_EQ(state["reason"], "Error");
  EXPECT_THAT(state["message"].get<std::string>(), ::testing::HasSubstr("PeerLost"));
  EXPECT_EQ(pod["spec"]["nodeName"], "lockstep-local");
  EXPECT_THAT(pod["status"]["podIP"].get<std::string>(), ::testing::StartsWith("127.0."));
  EXPECT_EQ(Logs("fail"), "started\n");

  Create(Pod("ok", "exit 0"));
  json ok = Await("ok", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_EQ(ok["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
  EXPECT_NE(ok["status"]["podIP"], pod["status"]["podIP"]);  // each pod its own address
}

TEST_F(RunnerTest, OnFailureRestartsAreCounted) {
  std::string mark = (dir_ / "mark").string();
  Create(Pod("flaky", "test -f " + mark + " && exit 0; touch " + mark + "; exit 1", "OnFailure"));
  json pod = Await("flaky", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_EQ(pod["status"]["containerStatuses"][0]["restartCount"], 1);
}

TEST_F(RunnerTest, TheTrainerImageRunsTheLocalTrainerInItsWorkingDir) {
  json pod = Pod("train", "unused");
  json& c = pod["spec"]["containers"][0];
  c.erase("command");
  c["image"] = "lockstep/trainer:0.1.0";
  c["args"] = {"--model=mlp", "--epochs=1"};
  c["workingDir"] = "/tmp";
  Create(pod);
  Await("train", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_EQ(Logs("train"), "trainer --model=mlp --epochs=1 in /tmp\n");
}

TEST_F(RunnerTest, TheOperatorImageFromAnyRegistryRunsTheLocalOperator) {
  json pod = Pod("op", "unused");
  json& c = pod["spec"]["containers"][0];
  c.erase("command");
  c["image"] = "registry.example.com:5000/ml/lockstep/operator@sha256:0123";
  c["args"] = {"--leader-elect"};
  Create(pod);
  Await("op", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_THAT(Logs("op"), ::testing::StartsWith("trainer --leader-elect in "));
}

TEST_F(RunnerTest, EnvReferencesInCommandAndArgsAreExpanded) {
  json pod = Pod("expand", "unused");
  json& c = pod["spec"]["containers"][0];
  c["command"] = {"sh", "-c", "echo \"$0|$1|$2|$3\"", "$(GREETING)"};
  c["args"] = {"at $(POD_IP):80", "$$(GREETING)", "$(UNDEFINED)"};
  c["env"] = json::parse(R"([{"name":"GREETING","value":"hello"},
    {"name":"POD_IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}}])");
  Create(pod);
  json done = Await("expand", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_EQ(Logs("expand"), "hello|at " + done["status"]["podIP"].get<std::string>() +
                                ":80|$(GREETING)|$(UNDEFINED)\n");
}

TEST_F(RunnerTest, PodsGetTheirServiceAccountsToken) {
  // The namespace's default account, unless the pod names another or opts out.
  Create(Pod("sa",
             "grep -c token: $KUBECONFIG; grep server: $KUBECONFIG; "
             "cat $(dirname $KUBECONFIG)/namespace; echo"));
  Await("sa", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_EQ(Logs("sa"), "1\n    server: http://127.0.0.1:6443\ndefault\n");
  if (CanUnshareMounts()) {
    // Where Kubernetes puts it, even under a volume mounted at /var.
    json pod = Pod("mounted", "echo $KUBECONFIG; ls /var/run/secrets/kubernetes.io/serviceaccount");
    pod["spec"]["volumes"] = json::parse(R"([{"name":"var","emptyDir":{}}])");
    pod["spec"]["containers"][0]["volumeMounts"] =
        json::parse(R"([{"name":"var","mountPath":"/var/lib/lockstep-test"}])");
    Create(pod);
    Await("mounted", [](const json& p) { return Phase(p, "Succeeded"); });
    EXPECT_EQ(Logs("mounted"),
              "/var/run/secrets/kubernetes.io/serviceaccount/kubeconfig\nkubeconfig\nnamespace\n"
              "token\n");
  }
  json off = Pod("off", "echo \"[$KUBECONFIG]\"");
  off["spec"]["automountServiceAccountToken"] = false;
  Create(off);
  Await("off", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_EQ(Logs("off"), "[]\n");

  json missing = Pod("missing", "true");
  missing["spec"]["serviceAccountName"] = "nobody";
  Create(missing);
  json seen = Await("missing", [](const json& p) {
    return p.is_object() && p.contains("status") && p["status"].contains("containerStatuses");
  });
  const json& waiting = seen["status"]["containerStatuses"][0]["state"]["waiting"];
  EXPECT_EQ(waiting["reason"], "CreateContainerConfigError");
  EXPECT_THAT(waiting["message"].get<std::string>(),
              ::testing::HasSubstr("serviceaccount \"nobody\" not found"));
}

TEST_F(RunnerTest, AProcessIgnoringSigtermIsKilledAfterTheGracePeriod) {
  Create(Pod("stubborn", "trap '' TERM; echo $$$$; sleep 300"));
  pid_t pgid = ProcessGroupOf("stubborn");
  ASSERT_GT(pgid, 0);
  auto asked = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->Delete(kube::resources::kPods, "default", "stubborn").ok());
  Await("stubborn", [](const json& p) { return p.is_null(); });
  // terminationGracePeriodSeconds is 1: SIGTERM was ignored, SIGKILL came after it.
  EXPECT_GE(std::chrono::steady_clock::now() - asked, std::chrono::seconds(1));
  EXPECT_EQ(AwaitEmptyGroup(pgid), 0);
}

TEST_F(RunnerTest, AnImageThatCannotRunWaitsWithAReason) {
  json pod = Pod("img", "true");
  pod["spec"]["containers"][0].erase("command");
  Create(pod);
  json seen = Await("img", [](const json& p) {
    return p.is_object() && p.contains("status") && p["status"].contains("containerStatuses");
  });
  const json& waiting = seen["status"]["containerStatuses"][0]["state"]["waiting"];
  EXPECT_EQ(waiting["reason"], "ErrImagePull");
  EXPECT_THAT(waiting["message"].get<std::string>(), ::testing::HasSubstr("no command"));
  EXPECT_EQ(seen["status"]["phase"], "Pending");
}

TEST_F(RunnerTest, DeletionStopsTheWholeProcessTree) {
  Create(Pod("tree", "echo $$$$; sleep 300 & sleep 300; wait"));
  pid_t pgid = ProcessGroupOf("tree");
  ASSERT_GT(pgid, 0);
  for (int i = 0; i < 3000 && CountGroup(pgid) < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(CountGroup(pgid), 3);  // sh and two sleeps
  ASSERT_TRUE(client_->Delete(kube::resources::kPods, "default", "tree").ok());
  Await("tree", [](const json& p) { return p.is_null(); });  // removed once stopped
  // The runner SIGKILLs the group when sh ends, so the sleeps end too; they may still be
  // exiting when the pod is removed.
  EXPECT_EQ(AwaitEmptyGroup(pgid), 0);
}

TEST_F(RunnerTest, StoppingTheRunnerLeavesNoProcess) {
  Create(Pod("lingering", "echo $$$$; exec sleep 300"));
  pid_t pgid = ProcessGroupOf("lingering");
  ASSERT_GT(pgid, 0);
  thread_.request_stop();
  thread_.join();
  EXPECT_EQ(AwaitEmptyGroup(pgid), 0);
}

// LocalTransport, except that every watch is a SilentWatch: it sends nothing and never
// returns by itself.
class SilentWatchTransport final : public kube::Transport {
 public:
  explicit SilentWatchTransport(ApiServer* api) : local_(api) {}
  absl::StatusOr<kube::HttpResponse> Send(const kube::HttpRequest& request) override {
    return local_.Send(request);
  }
  absl::StatusOr<kube::StreamedResponse> Open(const kube::HttpRequest& request) override {
    if (request.target.find("watch=true") == std::string::npos) return local_.Open(request);
    auto watch = std::make_shared<SilentWatch>();
    {
      std::lock_guard lock(mu_);
      watches_.push_back(watch);
      cv_.notify_all();
    }
    kube::StreamedResponse r;
    r.status = 200;
    r.headers = {{"Content-Type", "application/json"}};
    r.body = NewWatchBody(watch);
    return r;
  }
  // Waits until `n` watches were opened and each has a reader blocked in it.
  bool AwaitBlockedWatches(size_t n) {
    std::vector<std::shared_ptr<SilentWatch>> opened;
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return watches_.size() >= n; })) {
        return false;
      }
      opened = watches_;
    }
    return std::all_of(opened.begin(), opened.end(),
                       [](const auto& w) { return w->AwaitReader(std::chrono::seconds(60)); });
  }
  std::vector<std::shared_ptr<SilentWatch>> watches() {
    std::lock_guard lock(mu_);
    return watches_;
  }

 private:
  LocalTransport local_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<SilentWatch>> watches_;
};

// `lockstep local down` waits for this: the runner must stop while its informers' watches
// wait for events, without relying on a watch waking up now and then to notice.
TEST_F(RunnerTest, StoppingDoesNotWaitForAWatchToWakeUp) {
  thread_.request_stop();
  thread_.join();
  auto transport = std::make_shared<SilentWatchTransport>(api_.get());
  kube::RestClient client(transport);
  Runner runner(&client, RunnerOptions{.state_dir = dir_.string()}, clock_.get());
  std::jthread run([&runner](std::stop_token stop) { runner.Run(stop); });
  bool watching = transport->AwaitBlockedWatches(2);  // pods and services
  run.request_stop();
  run.join();
  ASSERT_TRUE(watching);
  for (const auto& w : transport->watches()) EXPECT_TRUE(w->cancelled());
}

TEST_F(RunnerTest, PodsReachEachOtherByServiceNameOverTcp) {
  if (!CanUnshareMounts()) GTEST_SKIP() << "no private mount namespaces here (needs root)";
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "python3 is not installed";
  json service = {{"apiVersion", "v1"}, {"kind", "Service"}, {"metadata", {{"name", "echo"}}}};
  service["spec"]["clusterIP"] = "None";
  service["spec"]["selector"] = {{"app", "server"}};
  service["spec"]["ports"] = json::array({{{"port", 7000}}});
  Create(service, kube::resources::kServices);
  json server = Pod("server",
                    "exec /usr/bin/python3 -c 'import os,socket\n"
                    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                    "s.bind((os.environ[\"POD_IP\"],7000)); s.listen()\n"
                    "c,_=s.accept(); c.sendall(b\"pong\"); c.close()'");
  server["spec"]["containers"][0]["env"] = {
      {{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}};
  Create(server);
  Await("server", [](const json& p) { return Phase(p, "Running"); });
  Create(Pod("client",
             "for i in $(seq 100); do /usr/bin/python3 -c 'import socket\n"
             "s=socket.create_connection((\"echo.default.svc\",7000)); print(s.recv(4).decode())' "
             "&& exit 0; sleep 0.1; done; exit 1"));
  json client =
      Await("client", [](const json& p) { return Phase(p, "Succeeded") || Phase(p, "Failed"); });
  EXPECT_EQ(client["status"]["phase"], "Succeeded") << "server: " << Logs("server").substr(0, 500);
  EXPECT_THAT(Logs("client"), ::testing::HasSubstr("pong"));
}

// The runner's rules over a fake ProcessLauncher: what it is asked to start, and how exit
// codes drive restarts and phases, with no real processes.
class FakeLauncher final : public ProcessLauncher {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable started_cv;  // notified on every Start and Signal
    std::vector<LaunchSpec> started;
    std::map<int, std::optional<int>> running;  // pid -> exit code once it "exits"
    std::vector<std::pair<int, int>> signals;   // pid, signal
    bool ignore_sigterm = false;                // processes that only SIGKILL ends
    int next_pid = 1000;
  };
  explicit FakeLauncher(std::shared_ptr<State> state) : state_(std::move(state)) {}

  absl::StatusOr<int> Start(const LaunchSpec& spec) override {
    std::lock_guard lock(state_->mu);
    state_->started.push_back(spec);
    int pid = state_->next_pid++;
    state_->running[pid] = std::nullopt;
    state_->started_cv.notify_all();
    return pid;
  }
  std::optional<int> Poll(int pid) override {
    std::lock_guard lock(state_->mu);
    auto it = state_->running.find(pid);
    if (it == state_->running.end() || !it->second) return std::nullopt;
    int code = *it->second;
    state_->running.erase(it);
    return code;
  }
  void Signal(int pid, int sig) override {
    std::lock_guard lock(state_->mu);
    state_->signals.push_back({pid, sig});
    state_->started_cv.notify_all();
    if (sig == SIGTERM && state_->ignore_sigterm) return;
    auto it = state_->running.find(pid);
    if (it != state_->running.end() && !it->second) it->second = 128 + sig;
  }
  void Wait(int pid) override {
    std::lock_guard lock(state_->mu);
    state_->running.erase(pid);
  }

 private:
  std::shared_ptr<State> state_;
};

class FakeLauncherRunnerTest : public RunnerTest {
 protected:
  void SetUp() override {
    RunnerTest::SetUp();
    // Replace the runner with one over the fake launcher.
    thread_.request_stop();
    thread_.join();
    runner_ = std::make_unique<Runner>(
        client_.get(),
        RunnerOptions{.state_dir = dir_.string(),
                      .trainer_binary = trainer_.string(),
                      .tick = absl::Milliseconds(10),
                      .crash_backoff_initial = absl::Milliseconds(10),
                      .launcher = [this] { return std::make_unique<FakeLauncher>(fake_); }},
        clock_.get());
    thread_ = std::jthread([this](std::stop_token stop) { runner_->Run(stop); });
  }
  // The pid of the n-th start, once it happened.
  int StartedPid(size_t n) {
    std::unique_lock lock(fake_->mu);
    if (!fake_->started_cv.wait_for(lock, std::chrono::seconds(60),
                                    [&] { return fake_->started.size() > n; })) {
      ADD_FAILURE() << "start " << n << " never happened";
      return -1;
    }
    return 1000 + static_cast<int>(n);
  }
  void Exit(int pid, int code) {
    std::lock_guard lock(fake_->mu);
    fake_->running[pid] = code;
  }

  std::shared_ptr<FakeLauncher::State> fake_ = std::make_shared<FakeLauncher::State>();
};

TEST_F(FakeLauncherRunnerTest, ExitCodesDriveRestartsAndPhase) {
  json pod = Pod("job", "unused", "OnFailure");
  pod["spec"]["containers"][0] = {{"name", "main"},
                                  {"image", "lockstep/trainer:1"},
                                  {"args", {"--epochs=$(E)"}},
                                  {"env", {{{"name", "E"}, {"value", "2"}}}}};
  Create(pod);
  int first = StartedPid(0);
  Await("job", [](const json& p) { return Phase(p, "Running"); });
  {
    std::lock_guard lock(fake_->mu);
    EXPECT_THAT(fake_->started[0].argv, ::testing::ElementsAre(trainer_.string(), "--epochs=2"));
  }
  Exit(first, 137);  // OnFailure: restarted after the crash-loop back-off
  int second = StartedPid(1);
  json restarted = Await("job", [](const json& p) {
    return Phase(p, "Running") && p["status"]["containerStatuses"][0]["restartCount"] == 1;
  });
  EXPECT_EQ(restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
            137);
  EXPECT_EQ(restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"],
            "Killed");
  Exit(second, 0);
  json done = Await("job", [](const json& p) { return Phase(p, "Succeeded"); });
  EXPECT_EQ(done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
  std::lock_guard lock(fake_->mu);
  EXPECT_EQ(fake_->started.size(), 2u);
  // Each exit is followed by a SIGKILL to what the container left in its group.
  EXPECT_THAT(fake_->signals, ::testing::Contains(std::pair<int, int>{first, SIGKILL}));
}

TEST_F(FakeLauncherRunnerTest, DeletionSignalsTheGroupAndRemovesThePod) {
  Create(Pod("gone", "unused", "Always"));
  Await("gone", [](const json& p) { return Phase(p, "Running"); });
  int pid = StartedPid(0);
  ASSERT_TRUE(client_->Delete(kube::resources::kPods, "default", "gone", {}).ok());
  Await("gone", [](const json& p) { return p.is_null(); });
  std::lock_guard lock(fake_->mu);
  ASSERT_FALSE(fake_->signals.empty());
  EXPECT_EQ(fake_->signals.front(), (std::pair<int, int>{pid, SIGTERM}));
  EXPECT_EQ(fake_->started.size(), 1u);  // a pod being deleted is not restarted
}

TEST_F(FakeLauncherRunnerTest, ASecondDeleteShortensTheGracePeriod) {
  {
    std::lock_guard lock(fake_->mu);
    fake_->ignore_sigterm = true;
  }
  Create(Pod("stubborn", "unused", "Always"));
  Await("stubborn", [](const json& p) { return Phase(p, "Running"); });
  int pid = StartedPid(0);
  // An hour to stop: SIGTERM is ignored, so the pod stays, terminating.
  ASSERT_TRUE(
      client_->Delete(kube::resources::kPods, "default", "stubborn", {.grace_period_seconds = 3600})
          .ok());
  {
    std::unique_lock lock(fake_->mu);
    ASSERT_TRUE(fake_->started_cv.wait_for(lock, std::chrono::seconds(60),
                                           [&] { return !fake_->signals.empty(); }));
  }
  // One second now: the runner kills it then, not in an hour, and the pod goes.
  ASSERT_TRUE(
      client_->Delete(kube::resources::kPods, "default", "stubborn", {.grace_period_seconds = 1})
          .ok());
  Await("stubborn", [](const json& p) { return p.is_null(); });
  std::lock_guard lock(fake_->mu);
  EXPECT_THAT(fake_->signals, ::testing::Contains(std::pair<int, int>{pid, SIGKILL}));
}

}  // namespace
}  // namespace lockstep::local
