// A job queued with Kueue, against a fake Kueue that follows the pod-group protocol of Kueue's
// plain-pod integration (v0.19: site/content/en/docs/tasks/run/plain_pods.md and
// pkg/controller/jobs/pod/): the operator's pods form one group, wait behind Kueue's gate until
// the group is admitted, are recreated under their names after a preemption, and the group is
// finished when the job ends, which releases Kueue's finalizers.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/str_util.h"
#include "operator/api/manifest.h"
#include "operator/kube/api_error.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/builtin_crds.h"
#include "operator/local/apiserver/local_transport.h"
#include "operator/trainingjob/controller.h"
#include "operator/trainingjob/testing.h"

namespace lockstep::trainingjob {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace res = kube::resources;

constexpr char kGroupLabel[] = "kueue.x-k8s.io/pod-group-name";
constexpr char kFinalizer[] = "kueue.x-k8s.io/managed";
constexpr char kGate[] = "kueue.x-k8s.io/admission";

// Kueue's pod webhook (pod_webhook.go Default): a pod created with a queue and a group gets
// the managed label, Kueue's finalizer and the admission gate. It sits in front of the API
// server as a mutating admission webhook does.
class KueueWebhook final : public kube::Transport {
 public:
  explicit KueueWebhook(std::shared_ptr<kube::Transport> inner) : inner_(std::move(inner)) {}

  absl::StatusOr<kube::HttpResponse> Send(const kube::HttpRequest& r) override {
    if (r.method != "POST" || !r.target.ends_with("/pods")) return inner_->Send(r);
    json pod = json::parse(r.body, nullptr, false);
    const json labels = pod["metadata"].value("labels", json::object());
    if (!labels.contains("kueue.x-k8s.io/queue-name") || !labels.contains(kGroupLabel)) {
      return inner_->Send(r);
    }
    pod["metadata"]["labels"]["kueue.x-k8s.io/managed"] = "true";
    pod["metadata"]["finalizers"].push_back(kFinalizer);
    pod["spec"]["schedulingGates"].push_back({{"name", kGate}});
    kube::HttpRequest mutated = r;
    mutated.body = pod.dump();
    ++mutated_;
    return inner_->Send(mutated);
  }
  absl::StatusOr<kube::StreamedResponse> Open(const kube::HttpRequest& r) override {
    return inner_->Open(r);
  }
  int mutated() const { return mutated_.load(); }

 private:
  std::shared_ptr<kube::Transport> inner_;
  std::atomic<int> mutated_{0};
};

// Kueue's pod controller for one group, stepped by the test.
class FakeKueue {
 public:
  explicit FakeKueue(kube::RestClient* client) : client_(client) {}

  std::vector<json> Pods(const std::string& group) {
    absl::StatusOr<json> l =
        client_->List(res::kPods, "ns", {.label_selector = StrCat(kGroupLabel, "=", group)});
    std::vector<json> out;
    if (l.ok()) {
      for (const json& p : (*l)["items"]) out.push_back(p);
    }
    return out;
  }
  static bool Deleting(const json& p) { return p["metadata"].contains("deletionTimestamp"); }
  static std::string Phase(const json& p) { return p["status"].value("phase", ""); }
  static bool Gated(const json& p) {
    return p["spec"].contains("schedulingGates") && !p["spec"]["schedulingGates"].empty();
  }

  // Admission: once the group has pod-group-total-count pods that are neither failed nor
  // being deleted, every gated one is ungated. Returns the pods ungated.
  int Admit(const std::string& group) {
    std::vector<json> pods = Pods(group);
    int runnable = 0, total = 0;
    for (const json& p : pods) {
      total = std::stoi(
          p["metadata"]["annotations"].value("kueue.x-k8s.io/pod-group-total-count", "0"));
      if (!Deleting(p) && Phase(p) != "Failed") ++runnable;
    }
    if (total == 0 || runnable < total) return 0;
    int ungated = 0;
    for (const json& p : pods) {
      if (!Gated(p) || Deleting(p)) continue;
      absl::StatusOr<json> r = client_->Patch(
          res::kPods, "ns", p["metadata"]["name"].get<std::string>(), kube::PatchType::kJson,
          json::array({{{"op", "remove"}, {"path", "/spec/schedulingGates"}}}));
      if (r.ok()) ++ungated;
    }
    return ungated;
  }

  // Preemption (Pod.Stop with WorkloadEvictedDueToPreempted): every pod that runs gets the
  // TerminationTarget condition and is deleted; Kueue's finalizer holds it.
  int Evict(const std::string& group) {
    int evicted = 0;
    for (json p : Pods(group)) {
      if (Gated(p) || Deleting(p) || Phase(p) == "Succeeded" || Phase(p) == "Failed") continue;
      const std::string name = p["metadata"]["name"];
      p["status"]["conditions"].push_back({{"type", "TerminationTarget"},
                                           {"status", "True"},
                                           {"reason", "WorkloadEvictedDueToPreempted"},
                                           {"message",
                                            "Preempted to accommodate a workload (UID: w2) due to "
                                            "prioritization in the ClusterQueue"}});
      EXPECT_TRUE(client_->UpdateStatus(res::kPods, "ns", p).ok());
      EXPECT_TRUE(client_->Delete(res::kPods, "ns", name, {}).ok());
      ++evicted;
    }
    return evicted;
  }

  // Finished (Pod.Finished for a group): every pod succeeded, or none runs or waits and one
  // says retriable-in-group "false". Then Kueue's finalizers come off every pod.
  bool FinishIfDone(const std::string& group) {
    std::vector<json> pods = Pods(group);
    if (pods.empty()) return false;
    int succeeded = 0, total = 0;
    bool active = false, unretriable = false;
    for (const json& p : pods) {
      total = std::stoi(
          p["metadata"]["annotations"].value("kueue.x-k8s.io/pod-group-total-count", "0"));
      const std::string phase = Phase(p);
      if (phase == "Succeeded") ++succeeded;
      if (phase == "Running" || phase == "Pending") active = true;
      if (p["metadata"]["annotations"].value("kueue.x-k8s.io/retriable-in-group", "") == "false") {
        unretriable = true;
      }
    }
    if (!(succeeded == total || (!active && unretriable))) return false;
    for (const json& p : pods) {
      json finalizers = json::array();
      for (const json& f : p["metadata"].value("finalizers", json::array())) {
        if (f != kFinalizer) finalizers.push_back(f);
      }
      (void)client_->Patch(res::kPods, "ns", p["metadata"]["name"].get<std::string>(),
                           kube::PatchType::kMerge, {{"metadata", {{"finalizers", finalizers}}}});
    }
    return true;
  }

 private:
  kube::RestClient* client_;
};

class KueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = *local::ApiServer::Create({});
    ASSERT_TRUE(local::InstallCrd(api_.get(), local::TrainingJobCrdYaml()).ok());
    auto local = std::make_shared<local::LocalTransport>(api_.get());
    webhook_ = std::make_shared<KueueWebhook>(local);
    operator_client_ = std::make_unique<kube::RestClient>(webhook_);
    client_ = std::make_unique<kube::RestClient>(local);
    kueue_ = std::make_unique<FakeKueue>(client_.get());
    clock_ = common::NewRealClock();
    json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "ns"}}}};
    ASSERT_TRUE(client_->Create(res::kNamespaces, "", ns).ok());
    controller_ = std::make_unique<TrainingJobController>(
        operator_client_.get(), clock_.get(), &metrics_, nullptr, ControllerOptions{.workers = 2});
    operator_ = std::jthread([this](std::stop_token stop) { controller_->Run(stop); });
  }
  void TearDown() override {
    operator_.request_stop();
    operator_.join();
  }

  bool WaitFor(const std::function<bool()>& pred, const std::string& what) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "timed out waiting for " << what;
    return false;
  }
  json Job(const std::string& name) {
    absl::StatusOr<json> j = client_->Get(res::kTrainingJobs, "ns", name);
    return j.ok() ? *j : json();
  }
  std::string State(const std::string& name) {
    json j = Job(name);
    return j.contains("status") ? j["status"].value("state", "") : "";
  }
  // The kubelet's part, as the controller's own tests play it.
  void SetPod(const std::string& name, const std::string& phase, int exit_code = 0) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      absl::StatusOr<json> pod = client_->Get(res::kPods, "ns", name);
      ASSERT_TRUE(pod.ok()) << name;
      json status = (*pod)["status"];
      status["phase"] = phase;
      status["podIP"] = "127.0.9.1";
      json c = {{"name", "tensorflow"}, {"restartCount", 0}, {"ready", phase == "Running"}};
      if (phase == "Running") {
        c["state"]["running"]["startedAt"] = "2026-11-29T10:00:00Z";
      } else {
        c["state"]["terminated"] = {{"exitCode", exit_code},
                                    {"reason", exit_code == 0 ? "Completed" : "Error"}};
      }
      status["containerStatuses"] = json::array({c});
      (*pod)["status"] = status;
      absl::StatusOr<json> r = client_->UpdateStatus(res::kPods, "ns", *pod);
      if (r.ok()) return;
      ASSERT_TRUE(kube::IsApiConflict(r.status())) << r.status();
    }
    FAIL() << "could not write the status of " << name;
  }
  std::string Uid(const std::string& pod) {
    absl::StatusOr<json> p = client_->Get(res::kPods, "ns", pod);
    return p.ok() ? p->at("metadata").value("uid", "") : "";
  }

  // A chief and two workers queued in Kueue's LocalQueue team-a by the job's label.
  std::string CreateQueuedJob() {
    json j = testing::JobJson("MultiWorkerMirrored",
                              {{"Chief", 1, "ExitCode"}, {"Worker", 2, "ExitCode"}}, json());
    j["metadata"] = {
        {"name", "q"}, {"namespace", "ns"}, {"labels", {{"kueue.x-k8s.io/queue-name", "team-a"}}}};
    j["spec"]["runPolicy"]["pendingTimeoutSeconds"] = 1;
    absl::StatusOr<json> created = client_->Create(res::kTrainingJobs, "ns", j);
    EXPECT_TRUE(created.ok()) << created.status();
    return StrCat("q-", (*created)["metadata"]["uid"].get<std::string>().substr(0, 8));
  }

  std::unique_ptr<local::ApiServer> api_;
  std::shared_ptr<KueueWebhook> webhook_;
  std::unique_ptr<kube::RestClient> operator_client_;
  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<FakeKueue> kueue_;
  std::unique_ptr<common::Clock> clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<TrainingJobController> controller_;
  std::jthread operator_;
};

const std::vector<std::string> kPods = {"q-chief-0", "q-worker-0", "q-worker-1"};

TEST_F(KueueTest, AQueuedJobRunsAsOneGroupThroughAdmissionPreemptionAndItsEnd) {
  const std::string group = CreateQueuedJob();
  // One group of three, each pod gated by Kueue's webhook.
  ASSERT_TRUE(WaitFor([&] { return kueue_->Pods(group).size() == 3; }, "the group's 3 pods"));
  for (const json& p : kueue_->Pods(group)) {
    EXPECT_EQ(p["metadata"]["labels"].value("kueue.x-k8s.io/queue-name", ""), "team-a");
    EXPECT_EQ(p["metadata"]["annotations"].value("kueue.x-k8s.io/pod-group-total-count", ""), "3");
    EXPECT_TRUE(FakeKueue::Gated(p));
    EXPECT_EQ(p["metadata"]["finalizers"], json::array({kFinalizer}));
    // The API server refuses to schedule it while gated.
    absl::StatusOr<json> bound = client_->CreateSubresource(
        res::kPods, "ns", p["metadata"]["name"].get<std::string>(), "binding",
        {{"apiVersion", "v1"},
         {"kind", "Binding"},
         {"metadata", {{"name", p["metadata"]["name"]}}},
         {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "local"}}}});
    EXPECT_FALSE(bound.ok());
  }
  EXPECT_EQ(webhook_->mutated(), 3);

  // Admitted: ungated, the pods run.
  EXPECT_EQ(kueue_->Admit(group), 3);
  for (const std::string& p : kPods) SetPod(p, "Running");
  ASSERT_TRUE(WaitFor([&] { return State("q") == "Running"; }, "Running"));

  // Preempted: Kueue deletes the running pods, holding them with its finalizer; their
  // containers stop. The operator takes the finalizer off each stopped pod and recreates it
  // under its name, gated again, without spending a restart.
  std::map<std::string, std::string> before;
  for (const std::string& p : kPods) before[p] = Uid(p);
  EXPECT_EQ(kueue_->Evict(group), 3);
  for (const std::string& p : kPods) SetPod(p, "Failed", 143);
  ASSERT_TRUE(WaitFor(
      [&] {
        std::vector<json> pods = kueue_->Pods(group);
        if (pods.size() != 3) return false;
        for (const json& p : pods) {
          const std::string name = p["metadata"]["name"];
          if (p["metadata"]["uid"] == before[name] || !FakeKueue::Gated(p)) return false;
        }
        return true;
      },
      "the group recreated under its names, gated"));
  json job = Job("q");
  EXPECT_EQ(job["status"].value("restartCount", -1), 0);
  EXPECT_EQ(job["status"].value("attempt", -1), 0);
  EXPECT_EQ(webhook_->mutated(), 6);
  bool said = false;
  const json disruptions = job["status"].value("disruptions", json::object());
  for (const auto& [name, cause] : disruptions.items()) {
    said =
        said || cause.get<std::string>().find("WorkloadEvictedDueToPreempted") != std::string::npos;
  }
  EXPECT_TRUE(said) << job["status"].dump();

  // Admitted again; the job runs to its end, and the group is finished as Kueue expects.
  EXPECT_EQ(kueue_->Admit(group), 3);
  for (const std::string& p : kPods) SetPod(p, "Running");
  ASSERT_TRUE(WaitFor([&] { return State("q") == "Running"; }, "Running again"));
  SetPod("q-chief-0", "Failed", 1);  // a permanent exit: the job fails
  ASSERT_TRUE(WaitFor([&] { return State("q") == "Failed"; }, "Failed"));
  // Every pod says the group is done; the running workers go (cleanPodPolicy Running) and stop.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& p : kueue_->Pods(group)) {
          if (p["metadata"]["annotations"].value("kueue.x-k8s.io/retriable-in-group", "") !=
              "false") {
            return false;
          }
        }
        return true;
      },
      "retriable-in-group false on every pod"));
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& p : kueue_->Pods(group)) {
          if (FakeKueue::Phase(p) == "Running" && !FakeKueue::Deleting(p)) return false;
        }
        return true;
      },
      "the workers deleted"));
  for (const char* w : {"q-worker-0", "q-worker-1"}) SetPod(w, "Failed", 143);
  EXPECT_TRUE(kueue_->FinishIfDone(group));
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& p : kueue_->Pods(group)) {
          if (FakeKueue::Deleting(p)) return false;  // released: gone
        }
        return true;
      },
      "the deleted pods released"));
}

// A job without a queue, or whose queue is Volcano's, is no pod group.
TEST(KueueQueueTest, ALabelOrASchedulingQueueNotVolcanos) {
  api::TrainingJob job = testing::Job("MultiWorkerMirrored", {{"Worker", 2, "ExitCode"}});
  EXPECT_FALSE(KueueQueue(job, GangScheduler::kNone));
  job.spec.run_policy.scheduling_policy = api::SchedulingPolicy{.queue = "team-b"};
  EXPECT_EQ(KueueQueue(job, GangScheduler::kNone), "team-b");
  EXPECT_EQ(KueueQueue(job, GangScheduler::kSchedulerPlugins), "team-b");
  EXPECT_FALSE(KueueQueue(job, GangScheduler::kVolcano));
  job.metadata.labels["kueue.x-k8s.io/queue-name"] = "team-a";
  EXPECT_EQ(KueueQueue(job, GangScheduler::kVolcano), "team-a");
  job.spec.run_policy.elastic = api::Elastic{.min_replicas = 1, .max_replicas = 4};
  EXPECT_FALSE(KueueQueue(job, GangScheduler::kNone));
  json pod = DesiredPod(testing::Job("MultiWorkerMirrored", {{"Worker", 2, "ExitCode"}}),
                        api::ReplicaType::kWorker, 1, 0, {});
  EXPECT_FALSE(pod["metadata"]["labels"].contains("kueue.x-k8s.io/queue-name"));
}

}  // namespace
}  // namespace lockstep::trainingjob
