// The TrainingJob controller against the embedded API server of `lockstep local`, with pods
// simulated: the test plays the kubelet by writing pod status. Every wait is for a condition
// read back from the API server, never a fixed sleep.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <thread>

#include "common/clock.h"
#include "common/str_util.h"
#include "operator/api/manifest.h"
#include "operator/kube/api_error.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/builtin_crds.h"
#include "operator/local/apiserver/local_transport.h"
#include "operator/trainingjob/controller.h"
#include "operator/trainingjob/observe.h"
#include "operator/trainingjob/testing.h"

namespace lockstep::trainingjob {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace res = kube::resources;

// Injects faults between the controller and the API server: every Nth write answered 500,
// every Nth status write answered 409, every watch ended after a few chunks. Counts the pod
// creates that succeeded, per pod name. With hold_creates_for = N, a pod or Service create
// waits (5 s at most) until N are in flight together, and the most ever in flight is kept.
class FaultyTransport final : public kube::Transport {
 public:
  explicit FaultyTransport(std::shared_ptr<kube::Transport> inner) : inner_(std::move(inner)) {}

  std::atomic<int> fail_every_nth_write{0};
  std::atomic<int> conflict_every_nth_status{0};
  std::atomic<int> drop_watch_after_chunks{0};
  std::function<void(const std::string& pod)> on_pod_created;
  std::atomic<int> hold_creates_for{0};
  int max_creates_in_flight() {
    std::lock_guard lock(mu_);
    return max_in_flight_;
  }

  int PodCreates(const std::string& name) {
    std::lock_guard lock(mu_);
    return pod_creates_[name];
  }
  int TotalPodCreates() {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [k, v] : pod_creates_) n += v;
    return n;
  }
  int injected() const { return injected_.load(); }

  absl::StatusOr<kube::HttpResponse> Send(const kube::HttpRequest& r) override {
    bool write = r.method != "GET";
    bool status_write = r.method == "PUT" && r.target.find("/status") != std::string::npos;
    if (write && fail_every_nth_write > 0 && ++writes_ % fail_every_nth_write == 0) {
      return Injected(500, "InternalError");
    }
    if (status_write && conflict_every_nth_status > 0 &&
        ++status_writes_ % conflict_every_nth_status == 0) {
      return Injected(409, "Conflict");
    }
    const bool child_create =
        r.method == "POST" && (r.target.ends_with("/pods") || r.target.ends_with("/services"));
    if (child_create) Hold();
    absl::StatusOr<kube::HttpResponse> res = inner_->Send(r);
    if (child_create) {
      std::lock_guard lock(mu_);
      --in_flight_;
    }
    if (res.ok() && res->status == 201 && r.method == "POST" && r.target.ends_with("/pods")) {
      std::string name = json::parse(res->body)["metadata"]["name"];
      {
        std::lock_guard lock(mu_);
        pod_creates_[name] += 1;
      }
      if (on_pod_created) on_pod_created(name);
    }
    return res;
  }

  absl::StatusOr<kube::StreamedResponse> Open(const kube::HttpRequest& r) override {
    absl::StatusOr<kube::StreamedResponse> res = inner_->Open(r);
    if (!res.ok() || drop_watch_after_chunks <= 0) return res;
    res->body = std::make_unique<Dropping>(std::move(res->body), drop_watch_after_chunks.load());
    return res;
  }

 private:
  class Dropping final : public kube::BodyStream {
   public:
    Dropping(std::unique_ptr<kube::BodyStream> inner, int n) : inner_(std::move(inner)), left_(n) {}
    absl::StatusOr<std::string> Read() override {
      if (left_-- <= 0) return absl::UnavailableError("injected: watch dropped");
      return inner_->Read();
    }
    void Cancel() override { inner_->Cancel(); }

   private:
    std::unique_ptr<kube::BodyStream> inner_;
    int left_;
  };

  void Hold() {
    std::unique_lock lock(mu_);
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    if (in_flight_ >= hold_creates_for) released_ = true;
    hold_cv_.notify_all();
    hold_cv_.wait_for(lock, std::chrono::seconds(5), [&] { return released_; });
  }

  kube::HttpResponse Injected(int code, const std::string& reason) {
    injected_ += 1;
    json status = {{"kind", "Status"},      {"apiVersion", "v1"}, {"status", "Failure"},
                   {"message", "injected"}, {"reason", reason},   {"code", code}};
    return {code, {{"Content-Type", "application/json"}}, status.dump()};
  }

  std::shared_ptr<kube::Transport> inner_;
  std::atomic<int> writes_{0};
  std::atomic<int> status_writes_{0};
  std::atomic<int> injected_{0};
  std::mutex mu_;
  std::condition_variable hold_cv_;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  bool released_ = false;
  std::map<std::string, int> pod_creates_;
};

// The value at a JSON pointer, or null when any part of the path is missing (a status being
// written may not have every field yet).
json Field(const json& j, const std::string& pointer) {
  json::json_pointer p(pointer);
  return j.is_object() && j.contains(p) ? j.at(p) : json();
}

class FixedProgress final : public ProgressSource {
 public:
  absl::StatusOr<api::Progress> Fetch(const std::string& ip, int32_t port) override {
    std::unique_lock lock(mu_);
    last_address_ = StrCat(ip, ":", port);
    ++fetches_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hung_; });  // a chief that never answers
    return progress_;
  }
  void Hang(bool hung) {
    std::lock_guard lock(mu_);
    hung_ = hung;
    cv_.notify_all();
  }
  void WaitForFetch() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return fetches_ > 0; });
  }
  void Set(api::Progress p) {
    std::lock_guard lock(mu_);
    progress_ = std::move(p);
  }
  std::string last_address() {
    std::lock_guard lock(mu_);
    return last_address_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  api::Progress progress_;
  std::string last_address_;
  int fetches_ = 0;
  bool hung_ = false;
};

class ControllerIntegrationTest : public ::testing::Test {
 protected:
  void CreateCrd(const json& crd) {
    ASSERT_EQ(api_->Handle({.method = "POST",
                            .path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                            .content_type = "application/json",
                            .body = crd.dump()})
                  .status,
              201);
  }
  void SetUp() override {
    api_ = *local::ApiServer::Create({});
    json crd = (*api::ParseYamlDocuments(local::TrainingJobCrdYaml()))[0];
    CreateCrd(crd);
    auto local = std::make_shared<local::LocalTransport>(api_.get());
    faults_ = std::make_shared<FaultyTransport>(local);
    operator_client_ = std::make_unique<kube::RestClient>(faults_);
    client_ = std::make_unique<kube::RestClient>(local);
    clock_ = common::NewRealClock();
    json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "ns"}}}};
    ASSERT_TRUE(client_->Create(res::kNamespaces, "", ns).ok());
  }

  void TearDown() override { StopOperator(); }

  void StartOperator(GangScheduler gang = GangScheduler::kNone) {
    controller_ = std::make_unique<TrainingJobController>(
        operator_client_.get(), clock_.get(), &metrics_, &progress_,
        ControllerOptions{.workers = 2,
                          .reconciler = {.planner = {.desired = {.gang = gang}}},
                          .progress = {.interval = absl::Milliseconds(200)}});
    operator_ = std::jthread([this](std::stop_token stop) { controller_->Run(stop); });
  }
  void StopOperator() {
    progress_.Hang(false);  // lets a poller thread blocked in a fetch see the stop
    if (operator_.joinable()) {
      operator_.request_stop();
      operator_.join();
    }
    controller_.reset();
  }

  void Create(const json& job) {
    absl::StatusOr<json> r = client_->Create(res::kTrainingJobs, "ns", job);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  json Job(const std::string& name) {
    absl::StatusOr<json> j = client_->Get(res::kTrainingJobs, "ns", name);
    return j.ok() ? *j : json();
  }
  std::string State(const std::string& name) {
    json j = Job(name);
    json state = Field(j, "/status/state");
    return state.is_string() ? state.get<std::string>() : "";
  }
  json Condition(const std::string& job, const std::string& type) {
    json j = Job(job);
    for (const json& c : j["status"]["conditions"]) {
      if (c["type"] == type) return c;
    }
    return json();
  }
  std::vector<json> List(const kube::Resource& r, const std::string& job) {
    absl::StatusOr<json> l =
        client_->List(r, "ns", {.label_selector = "lockstep.io/job-name=" + job});
    std::vector<json> out;
    if (l.ok()) {
      for (const json& i : (*l)["items"]) out.push_back(i);
    }
    return out;
  }
  std::vector<json> Pods(const std::string& job, int attempt = -1) {
    std::vector<json> out;
    for (json& p : List(res::kPods, job)) {
      if (attempt < 0 ||
          p["metadata"]["labels"]["lockstep.io/attempt"] == std::to_string(attempt)) {
        out.push_back(std::move(p));
      }
    }
    return out;
  }

  // Polls the API server until `pred` holds; fails the test after `limit`.
  bool WaitFor(const std::function<bool()>& pred, const std::string& what,
               std::chrono::seconds limit = std::chrono::seconds(60)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "timed out waiting for " << what;
    return false;
  }
  bool WaitState(const std::string& job, const std::string& state) {
    return WaitFor([&] { return State(job) == state; }, job + " to be " + state);
  }
  // Whether the job has an event of `reason` (events outlive the job).
  bool HasEvent(const std::string& job, const std::string& reason) {
    absl::StatusOr<json> l = client_->List(res::kEvents, "ns", {});
    if (!l.ok()) return false;
    for (const json& e : (*l)["items"]) {
      if (e["involvedObject"]["name"] == job && e["reason"] == reason) return true;
    }
    return false;
  }

  // The kubelet's part: the pod's phase and its container's state.
  void SetPod(const std::string& name, const std::string& phase, int exit_code = 0,
              const std::string& message = "", int restarts = 0) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      absl::StatusOr<json> pod = client_->Get(res::kPods, "ns", name);
      ASSERT_TRUE(pod.ok()) << name;
      json status = json::object();
      status["phase"] = phase;
      status["podIP"] = "127.0.9.1";
      json c = {{"name", "tensorflow"}, {"restartCount", restarts}, {"ready", phase == "Running"}};
      if (phase == "Running") {
        c["state"]["running"]["startedAt"] = "2026-11-21T10:00:00Z";
        status["conditions"] = json::array({{{"type", "Ready"}, {"status", "True"}}});
      } else if (phase == "Succeeded" || phase == "Failed") {
        c["state"]["terminated"] = {{"exitCode", exit_code},
                                    {"reason", exit_code == 0 ? "Completed" : "Error"},
                                    {"message", message}};
      }
      status["containerStatuses"] = json::array({c});
      (*pod)["status"] = status;
      absl::StatusOr<json> r = client_->UpdateStatus(res::kPods, "ns", *pod);
      if (r.ok()) return;
      ASSERT_TRUE(kube::IsApiConflict(r.status())) << r.status();
    }
    FAIL() << "could not write the status of " << name;
  }
  void RunAll(const std::string& job, int attempt, int expected) {
    ASSERT_TRUE(WaitFor([&] { return static_cast<int>(Pods(job, attempt).size()) == expected; },
                        StrCat(expected, " pods of attempt ", attempt)));
    for (const json& p : Pods(job, attempt)) SetPod(p["metadata"]["name"], "Running");
  }

  std::unique_ptr<local::ApiServer> api_;
  std::shared_ptr<FaultyTransport> faults_;
  std::unique_ptr<kube::RestClient> operator_client_;
  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<common::Clock> clock_;
  common::MetricsRegistry metrics_;
  FixedProgress progress_;
  std::unique_ptr<TrainingJobController> controller_;
  std::jthread operator_;
};

json MwmJob(const std::string& name, int workers, json extra = json::object()) {
  json j = testing::JobJson("MultiWorkerMirrored", {{"Worker", workers, "ExitCode"}}, extra);
  j["metadata"] = {{"name", name}, {"namespace", "ns"}};
  return j;
}

const json* Env(const json& pod, const std::string& name) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == name) return &e;
  }
  return nullptr;
}

TEST_F(ControllerIntegrationTest, CreatesPodsServicesAndSecretWithTheEnvironment) {
  StartOperator();
  Create(MwmJob("t", 2));
  ASSERT_TRUE(
      WaitFor([&] { return Pods("t").size() == 2 && List(res::kServices, "t").size() == 2; },
              "2 pods and 2 services"));
  absl::StatusOr<json> pod = client_->Get(res::kPods, "ns", "t-worker-1");
  ASSERT_TRUE(pod.ok());
  ASSERT_NE(Env(*pod, "TF_CONFIG"), nullptr);
  EXPECT_EQ(
      (*Env(*pod, "TF_CONFIG"))["value"],
      R"({"cluster":{"worker":["t-worker-0.ns.svc:2222","t-worker-1.ns.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ((*Env(*pod, "LOCKSTEP_ATTEMPT"))["value"], "0");
  EXPECT_EQ((*pod)["spec"]["restartPolicy"], "Never");
  absl::StatusOr<json> secret = client_->Get(res::kSecrets, "ns", "t-token");
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ((*secret)["data"]["token"].get<std::string>().size(), 88u);  // 64 hex, base64
  absl::StatusOr<json> svc = client_->Get(res::kServices, "ns", "t-worker-0");
  ASSERT_TRUE(svc.ok());
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
  EXPECT_TRUE(WaitState("t", "Created"));
  RunAll("t", 0, 2);
  EXPECT_TRUE(WaitState("t", "Running"));
  // Progress from the chief (worker 0 here) reaches status.progress.
  progress_.Set({.step = 5, .total_steps = 10});
  EXPECT_TRUE(WaitFor([&] { return Field(Job("t"), "/status/progress/summary") == "50% (5/10)"; },
                      "progress in the status"));
  EXPECT_EQ(progress_.last_address(), "127.0.9.1:9464");
  EXPECT_GE(metrics_.Value(kPodsCreatedMetric, {{"replica_type", "worker"}}), 2);
  EXPECT_THAT(metrics_.Render(), HasSubstr("lockstep_trainingjobs{state=\"Running\"} 1"));
  // Per job, for alerts: its state, restarts and budget (the default backoffLimit, 6).
  const common::MetricLabels job = {
      {"namespace", "ns"}, {"job_name", "t"}, {"kind", "TrainingJob"}};
  common::MetricLabels running = job;
  running.emplace_back("state", "Running");
  // The gauges read the operator's cache, which hears of its own status writes from the watch.
  EXPECT_TRUE(WaitFor(
      [&] {
        metrics_.Render();  // runs the collectors
        return metrics_.Value(kJobStateMetric, running) == 1;
      },
      "the job's state gauge"));
  EXPECT_EQ(metrics_.Value(kJobRestartsMetric, job), 0);
  EXPECT_EQ(metrics_.Value(kJobBackoffLimitMetric, job), 6);
  common::MetricLabels created = job;
  created.emplace_back("type", "Created");
  EXPECT_EQ(metrics_.Value(kJobConditionMetric, created), 1);
  // A change to a pod that the planner does not read is a reconcile that writes nothing, and
  // is counted apart from those that wrote.
  EXPECT_GE(metrics_.Count(kReconcileLatencyMetric, {{"writes", "some"}}), 1u);
  const uint64_t none_before = metrics_.Count(kReconcileLatencyMetric, {{"writes", "none"}});
  ASSERT_TRUE(client_
                  ->Patch(res::kPods, "ns", "t-worker-1", kube::PatchType::kMerge,
                          {{"metadata", {{"annotations", {{"example.com/note", "seen"}}}}}})
                  .ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return metrics_.Count(kReconcileLatencyMetric, {{"writes", "none"}}) > none_before;
      },
      "a reconcile that wrote nothing"));
}

// A job's Services and pods go out in parallel batches (4, then 8...), not one by one: with
// every create held until 4 are in flight, they are.
TEST_F(ControllerIntegrationTest, AJobsCreatesGoOutSideBySide) {
  faults_->hold_creates_for = 4;
  StartOperator();
  Create(MwmJob("t", 4));
  ASSERT_TRUE(
      WaitFor([&] { return Pods("t").size() == 4 && List(res::kServices, "t").size() == 4; },
              "4 pods and 4 services"));
  EXPECT_GE(faults_->max_creates_in_flight(), 4);
  EXPECT_EQ(faults_->TotalPodCreates(), 4);
}

json GroupRestart() { return {{"runPolicy", {{"recovery", "RestartGroup"}}}}; }

TEST_F(ControllerIntegrationTest, AHungChiefDoesNotHoldUpFailureHandling) {
  progress_.Hang(true);
  StartOperator();
  Create(MwmJob("t", 2, GroupRestart()));
  RunAll("t", 0, 2);
  ASSERT_TRUE(WaitState("t", "Running"));
  progress_.WaitForFetch();  // the poller is now stuck on the chief
  SetPod("t-worker-1", "Failed", 137);
  ASSERT_TRUE(WaitFor([&] { return Field(Job("t"), "/status/attempt") == 1; }, "attempt 1"));
  RunAll("t", 1, 2);
  EXPECT_TRUE(WaitState("t", "Running"));
}

TEST_F(ControllerIntegrationTest, GangSchedulingObservesThePodGroup) {
  json crd = {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", "podgroups.scheduling.volcano.sh"}}},
      {"spec",
       {{"group", "scheduling.volcano.sh"},
        {"scope", "Namespaced"},
        {"names", {{"plural", "podgroups"}, {"singular", "podgroup"}, {"kind", "PodGroup"}}},
        {"versions", json::array({{{"name", "v1beta1"},
                                   {"served", true},
                                   {"storage", true},
                                   {"schema",
                                    {{"openAPIV3Schema",
                                      {{"type", "object"},
                                       {"x-kubernetes-preserve-unknown-fields", true}}}}}}})}}}};
  CreateCrd(crd);
  const kube::Resource& pg = ResourceOf(ChildKind::kPodGroup, GangScheduler::kVolcano);
  StartOperator(GangScheduler::kVolcano);
  Create(MwmJob("t", 2));
  std::string uid;
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<json> g = client_->Get(pg, "ns", "t");
        if (g.ok()) uid = (*g)["metadata"]["uid"];
        return g.ok();
      },
      "the PodGroup"));
  EXPECT_EQ(client_->Get(pg, "ns", "t")->at("spec")["minMember"], 2);
  // Deleted behind the operator's back, it is created again: its existence is observed.
  ASSERT_TRUE(client_->Delete(pg, "ns", "t").ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<json> g = client_->Get(pg, "ns", "t");
        return g.ok() && (*g)["metadata"]["uid"] != uid;
      },
      "the PodGroup created again"));
}

TEST_F(ControllerIntegrationTest, RetryableFailureRestartsTheGroupThenRunsAgain) {
  StartOperator();
  Create(MwmJob("t", 2, GroupRestart()));
  RunAll("t", 0, 2);
  ASSERT_TRUE(WaitState("t", "Running"));
  SetPod("t-worker-1", "Failed", 137);
  ASSERT_TRUE(WaitFor([&] { return Field(Job("t"), "/status/attempt") == 1; }, "attempt 1"));
  EXPECT_EQ(Condition("t", "Restarting")["reason"], "WorkerExitedWithCode137");
  RunAll("t", 1, 2);
  ASSERT_TRUE(WaitState("t", "Running"));
  EXPECT_EQ(Job("t")["status"]["restartCount"], 1);
  EXPECT_EQ(faults_->PodCreates("t-worker-0"), 2);
}

// In place (MultiWorkerMirrored's default): the lost worker's pod alone is recreated, as its
// next incarnation in the same attempt; the chief's report of the recovery reaches
// status.recoveries, an event and the recovery-seconds histogram.
TEST_F(ControllerIntegrationTest, ALostWorkerIsReplacedAloneAndItsRecoveryRecorded) {
  StartOperator();
  Create(MwmJob("t", 3));
  RunAll("t", 0, 3);
  ASSERT_TRUE(WaitState("t", "Running"));
  SetPod("t-worker-2", "Failed", 137);
  ASSERT_TRUE(WaitFor([&] { return faults_->PodCreates("t-worker-2") == 2; }, "a new t-worker-2"));
  absl::StatusOr<json> pod = client_->Get(res::kPods, "ns", "t-worker-2");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ((*pod)["metadata"]["labels"]["lockstep.io/incarnation"], "1");
  EXPECT_EQ((*pod)["metadata"]["labels"]["lockstep.io/attempt"], "0");
  EXPECT_EQ((*Env(*pod, "LOCKSTEP_INCARNATION"))["value"], "1");
  EXPECT_EQ(faults_->PodCreates("t-worker-0"), 1);  // the survivors were left alone
  EXPECT_EQ(faults_->PodCreates("t-worker-1"), 1);
  RunAll("t", 0, 3);
  ASSERT_TRUE(WaitState("t", "Running"));
  EXPECT_EQ(Job("t")["status"]["attempt"], 0);
  EXPECT_EQ(Job("t")["status"]["restartCount"], 1);
  api::Progress p{.step = 40, .total_steps = 100};
  p.recoveries.push_back({.epoch = 1,
                          .replaced = "worker 2",
                          .rendezvous_seconds = 0.4,
                          .state_transfer_seconds = 0.1,
                          .recovery_seconds = 0.7,
                          .resumed_step = 31});
  progress_.Set(p);
  ASSERT_TRUE(WaitFor([&] { return Field(Job("t"), "/status/recoveries/0/resumedStep") == 31; },
                      "the recovery in the status"));
  EXPECT_EQ(Job("t")["status"]["recoveries"][0]["replaced"], "worker 2");
  EXPECT_FALSE(Job("t")["status"]["progress"].contains("recoveries"));
  // The histogram is observed after the status write lands: waited for, not read at once.
  EXPECT_TRUE(WaitFor(
      [&] {
        return metrics_.Render().find("lockstep_job_recovery_seconds_count 1") != std::string::npos;
      },
      "the recovery in the recovery-seconds histogram"));
}

TEST_F(ControllerIntegrationTest, PermanentFailureFailsNamingTheCulprit) {
  StartOperator();
  Create(MwmJob("t", 2));
  RunAll("t", 0, 2);
  SetPod("t-worker-0", "Failed", 2,
         R"({"reason":"BadData","message":"no train-images-idx3-ubyte"})");
  ASSERT_TRUE(WaitState("t", "Failed"));
  json c = Condition("t", "Failed");
  EXPECT_EQ(c["reason"], "WorkerExitedWithCode2");
  EXPECT_THAT(c["message"].get<std::string>(), HasSubstr("t-worker-0"));
  EXPECT_THAT(c["message"].get<std::string>(), HasSubstr("BadData"));
  // cleanPodPolicy Running: the worker still running is stopped.
  EXPECT_TRUE(WaitFor([&] { return Pods("t").size() == 1; }, "the running worker deleted"));
}

TEST_F(ControllerIntegrationTest, BackoffLimitExhausted) {
  StartOperator();
  Create(MwmJob("t", 1, {{"runPolicy", {{"backoffLimit", 1}, {"recovery", "RestartGroup"}}}}));
  RunAll("t", 0, 1);
  SetPod("t-worker-0", "Failed", 137);
  RunAll("t", 1, 1);
  SetPod("t-worker-0", "Failed", 139);
  ASSERT_TRUE(WaitState("t", "Failed"));
  EXPECT_EQ(Condition("t", "Failed")["reason"], "BackoffLimitExceeded");
  EXPECT_EQ(Job("t")["status"]["restartCount"], 1);
}

TEST_F(ControllerIntegrationTest, DeadlineFailsTheJobWithoutAnyOtherEvent) {
  StartOperator();
  Create(MwmJob("t", 2, {{"runPolicy", {{"activeDeadlineSeconds", 2}}}}));
  // Pods stay Pending: nothing but the timer can move the job.
  ASSERT_TRUE(WaitState("t", "Failed"));
  EXPECT_EQ(Condition("t", "Failed")["reason"], "DeadlineExceeded");
  EXPECT_TRUE(WaitFor([&] { return Pods("t").empty(); }, "pods cleaned up"));
}

// A volume whose ConfigMap does not exist keeps a pod in ContainerCreating, and the kubelet
// says why only in FailedMount events: the controller reads them for a pod waiting past the
// grace, and the job says so (Stalled FailedMount, naming the pod and the kubelet's message).
TEST_F(ControllerIntegrationTest, AVolumeThatCannotMountIsReadFromThePodsEvents) {
  StartOperator();
  Create(MwmJob("mount", 1, {{"runPolicy", {{"pendingTimeoutSeconds", 600}}}}));
  ASSERT_TRUE(WaitFor([&] { return Pods("mount").size() == 1; }, "the pod"));
  const std::string pod_name = "mount-worker-0";
  absl::StatusOr<json> pod = client_->Get(res::kPods, "ns", pod_name);
  ASSERT_TRUE(pod.ok());
  (*pod)["status"] = {{"phase", "Pending"},
                      {"containerStatuses",
                       {{{"name", "tensorflow"},
                         {"ready", false},
                         {"restartCount", 0},
                         {"state", {{"waiting", {{"reason", "ContainerCreating"}}}}}}}}};
  ASSERT_TRUE(client_->UpdateStatus(res::kPods, "ns", *pod).ok());
  const std::string why =
      "MountVolume.SetUp failed for volume \"settings\" : configmap \"settings\" not found";
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", pod_name + ".mount"}, {"namespace", "ns"}}},
                {"involvedObject",
                 {{"kind", "Pod"},
                  {"namespace", "ns"},
                  {"name", pod_name},
                  {"uid", (*pod)["metadata"]["uid"]}}},
                {"reason", "FailedMount"},
                {"type", "Warning"},
                {"message", why},
                {"lastTimestamp", "2026-11-29T10:00:00Z"}};
  ASSERT_TRUE(client_->Create(res::kEvents, "ns", event).ok());
  // The pod has waited the grace (10 s) by then: the planner looks again at its end.
  ASSERT_TRUE(WaitFor([&] { return Condition("mount", "Stalled")["reason"] == "FailedMount"; },
                      "Stalled FailedMount"));
  EXPECT_THAT(Condition("mount", "Stalled")["message"].get<std::string>(),
              HasSubstr("pod mount-worker-0 cannot start: FailedMount: " + why));
}

TEST_F(ControllerIntegrationTest, TtlDeletesTheJobAndItsChildren) {
  StartOperator();
  Create(MwmJob("t", 2,
                {{"runPolicy", {{"ttlSecondsAfterFinished", 1}, {"cleanPodPolicy", "None"}}}}));
  RunAll("t", 0, 2);
  SetPod("t-worker-0", "Succeeded");
  // A second after it succeeds the job is gone, maybe before a poll saw it Succeeded (a
  // loaded sanitizer run missed it): its events tell the order.
  ASSERT_TRUE(WaitFor([&] { return Job("t").is_null(); }, "the job deleted"));
  EXPECT_TRUE(WaitFor([&] { return HasEvent("t", "Worker0Succeeded"); }, "the success event"));
  EXPECT_TRUE(WaitFor([&] { return HasEvent("t", "TTLExpired"); }, "the TTL event"));
  EXPECT_TRUE(WaitFor(
      [&] {
        return Pods("t").empty() && List(res::kServices, "t").empty() &&
               List(res::kSecrets, "t").empty();
      },
      "children garbage-collected"));
}

TEST_F(ControllerIntegrationTest, SuspendAndResume) {
  StartOperator();
  Create(MwmJob("t", 2));
  RunAll("t", 0, 2);
  ASSERT_TRUE(WaitState("t", "Running"));
  json suspend = {{"spec", {{"runPolicy", {{"suspend", true}}}}}};
  ASSERT_TRUE(client_->Patch(res::kTrainingJobs, "ns", "t", kube::PatchType::kMerge, suspend).ok());
  ASSERT_TRUE(WaitState("t", "Suspended"));
  EXPECT_TRUE(WaitFor([&] { return Pods("t").empty() && List(res::kServices, "t").empty(); },
                      "pods and services deleted"));
  suspend["spec"]["runPolicy"]["suspend"] = false;
  ASSERT_TRUE(client_->Patch(res::kTrainingJobs, "ns", "t", kube::PatchType::kMerge, suspend).ok());
  RunAll("t", 0, 2);
  EXPECT_TRUE(WaitState("t", "Running"));
}

TEST_F(ControllerIntegrationTest, SucceededWorkerIsNotRecreatedAfterItsPodIsDeleted) {
  StartOperator();
  Create(MwmJob("t", 2, {{"successPolicy", "AllWorkers"}}));
  RunAll("t", 0, 2);
  SetPod("t-worker-1", "Succeeded");
  ASSERT_TRUE(WaitFor(
      [&] { return Field(Job("t"), "/status/replicaStatuses/Worker/completedIndexes") == "1"; },
      "worker 1 recorded as completed"));
  ASSERT_TRUE(client_->Delete(res::kPods, "ns", "t-worker-1").ok());
  SetPod("t-worker-0", "Succeeded");
  ASSERT_TRUE(WaitState("t", "Succeeded"));
  EXPECT_EQ(faults_->PodCreates("t-worker-1"), 1);
}

TEST_F(ControllerIntegrationTest, OperatorRestartedMidReconcileCreatesNoDuplicates) {
  std::atomic<bool> first{false};
  std::promise<void> created;
  faults_->on_pod_created = [&](const std::string&) {
    if (!first.exchange(true)) created.set_value();
  };
  StartOperator();
  Create(MwmJob("t", 4));
  created.get_future().wait();
  StopOperator();  // in the middle of creating the pods
  faults_->on_pod_created = nullptr;
  StartOperator();
  RunAll("t", 0, 4);
  ASSERT_TRUE(WaitState("t", "Running"));
  EXPECT_EQ(faults_->TotalPodCreates(), 4);
  EXPECT_EQ(Job("t")["status"]["restartCount"], 0);
}

TEST_F(ControllerIntegrationTest, ConvergesThroughServerErrorsConflictsAndDroppedWatches) {
  faults_->fail_every_nth_write = 4;
  faults_->conflict_every_nth_status = 3;
  faults_->drop_watch_after_chunks = 4;
  StartOperator();
  Create(MwmJob("t", 3, GroupRestart()));
  RunAll("t", 0, 3);
  ASSERT_TRUE(WaitState("t", "Running"));
  SetPod("t-worker-2", "Failed", 143);
  RunAll("t", 1, 3);
  ASSERT_TRUE(WaitState("t", "Running"));
  SetPod("t-worker-0", "Succeeded");
  ASSERT_TRUE(WaitState("t", "Succeeded"));
  EXPECT_GT(faults_->injected(), 0);
  EXPECT_EQ(faults_->TotalPodCreates(), 6);  // two attempts of three, nothing twice
  EXPECT_EQ(Job("t")["status"]["restartCount"], 1);
}

TEST_F(ControllerIntegrationTest, InvalidJobFailsAndOthersAreUnaffected) {
  StartOperator();
  json bad = testing::JobJson("MultiWorkerMirrored", {{"Worker", 2}, {"PS", 1}});
  bad["metadata"] = {{"name", "bad"}, {"namespace", "ns"}};
  Create(bad);
  Create(MwmJob("good", 2));
  ASSERT_TRUE(WaitState("bad", "Failed"));
  json c = Condition("bad", "Failed");
  EXPECT_EQ(c["reason"], "InvalidSpec");
  EXPECT_THAT(c["message"].get<std::string>(), HasSubstr("spec.replicaSpecs"));
  EXPECT_TRUE(Pods("bad").empty());
  RunAll("good", 0, 2);
  EXPECT_TRUE(WaitState("good", "Running"));
}

}  // namespace
}  // namespace lockstep::trainingjob
