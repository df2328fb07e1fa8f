// The TrainingJob controller at scale, in one process: the local API server in memory, the
// controller with 4 workers, and a simulated kubelet that marks every new pod Running. Creates
// JOBS MultiWorkerMirrored jobs of 4 pods (chief + 3 workers) at once and measures the time
// until every job is Running; then fails one worker of every job with a retryable exit code and
// measures the time until every job runs again as attempt 1. Reports reconciles, their mean
// latency, API writes per job, and the process's resident memory.
// Usage: controller_bench [JOBS]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "bench/bench_util.h"
#include "common/log.h"
#include "operator/api/manifest.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/builtin_crds.h"
#include "operator/local/apiserver/local_transport.h"
#include "operator/trainingjob/controller.h"

using nlohmann::json;
namespace lk = lockstep;
namespace res = lockstep::kube::resources;
using SteadyClock = std::chrono::steady_clock;

namespace {

// Counts writes on their way to the API server.
class CountingTransport final : public lk::kube::Transport {
 public:
  explicit CountingTransport(std::shared_ptr<lk::kube::Transport> inner) : inner_(inner) {}
  absl::StatusOr<lk::kube::HttpResponse> Send(const lk::kube::HttpRequest& r) override {
    if (r.method != "GET") writes += 1;
    return inner_->Send(r);
  }
  absl::StatusOr<lk::kube::StreamedResponse> Open(const lk::kube::HttpRequest& r) override {
    return inner_->Open(r);
  }
  std::atomic<int64_t> writes{0};

 private:
  std::shared_ptr<lk::kube::Transport> inner_;
};

double RssMiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

void SetStatus(lk::kube::RestClient& c, json pod, const std::string& phase, int exit_code) {
  json cs = {{"name", "lockstep"}, {"restartCount", 0}, {"ready", phase == "Running"}};
  if (phase == "Running") {
    cs["state"]["running"]["startedAt"] = "2026-11-21T10:00:00Z";
  } else {
    cs["state"]["terminated"] = {{"exitCode", exit_code}, {"reason", "Error"}};
  }
  pod["status"] = {{"phase", phase}, {"podIP", "127.0.0.2"}};
  pod["status"]["containerStatuses"] = json::array({cs});
  (void)c.UpdateStatus(res::kPods, "bench", pod);
}

// The kubelet: every pod without a phase becomes Running. Returns how many it moved.
int Kubelet(lk::kube::RestClient& c) {
  absl::StatusOr<json> pods = c.List(res::kPods, "bench");
  int moved = 0;
  if (!pods.ok()) return 0;
  for (const json& p : (*pods)["items"]) {
    if (p.contains("status") && p["status"].contains("phase") &&
        p["status"]["phase"] != "Pending") {
      continue;
    }
    SetStatus(c, p, "Running", 0);
    ++moved;
  }
  return moved;
}

int CountState(lk::kube::RestClient& c, const std::string& state, int attempt) {
  absl::StatusOr<json> jobs = c.List(res::kTrainingJobs, "bench");
  int n = 0;
  if (!jobs.ok()) return 0;
  for (const json& j : (*jobs)["items"]) {
    if (j.contains("status") && j["status"].value("state", "") == state &&
        j["status"].value("attempt", 0) == attempt) {
      ++n;
    }
  }
  return n;
}

double Converge(lk::kube::RestClient& c, int jobs, int attempt, SteadyClock::time_point t0) {
  while (CountState(c, "Running", attempt) < jobs) {
    if (Kubelet(c) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = argc > 1 ? std::atoi(argv[1]) : 200;
  lk::common::SetMinSeverity(lk::common::Severity::kWarning);
  std::unique_ptr<lk::local::ApiServer> api = *lk::local::ApiServer::Create({});
  json crd = (*lk::api::ParseYamlDocuments(lk::local::TrainingJobCrdYaml()))[0];
  api->Handle({.method = "POST",
               .path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
               .content_type = "application/json",
               .body = crd.dump()});
  auto local = std::make_shared<lk::local::LocalTransport>(api.get());
  auto counting = std::make_shared<CountingTransport>(local);
  lk::kube::RestClient operator_client(counting);
  lk::kube::RestClient client(local);
  (void)client.Create(
      res::kNamespaces, "",
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "bench"}}}});
  std::unique_ptr<lk::common::Clock> clock = lk::common::NewRealClock();
  lk::common::MetricsRegistry metrics;
  lk::trainingjob::TrainingJobController controller(&operator_client, clock.get(), &metrics,
                                                    nullptr, {.workers = 4});
  std::jthread op([&](std::stop_token s) { controller.Run(s); });
  while (!controller.Ready()) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  auto t0 = SteadyClock::now();
  for (int i = 0; i < jobs; ++i)
    (void)client.Create(res::kTrainingJobs, "bench",
                        lk::bench::MultiWorkerMirroredJob("job-" + std::to_string(i), "bench"));
  double start_s = Converge(client, jobs, 0, t0);
  int64_t start_writes = counting->writes.load();
  // Reconciles are counted by whether they wrote (writes=none|some).
  auto reconcile_count = [&] {
    return metrics.Count(lk::trainingjob::kReconcileLatencyMetric, {{"writes", "none"}}) +
           metrics.Count(lk::trainingjob::kReconcileLatencyMetric, {{"writes", "some"}});
  };
  auto reconcile_seconds = [&] {
    return metrics.Sum(lk::trainingjob::kReconcileLatencyMetric, {{"writes", "none"}}) +
           metrics.Sum(lk::trainingjob::kReconcileLatencyMetric, {{"writes", "some"}});
  };
  uint64_t start_reconciles = reconcile_count();

  auto t1 = SteadyClock::now();
  for (int i = 0; i < jobs; ++i) {
    absl::StatusOr<json> pod =
        client.Get(res::kPods, "bench", "job-" + std::to_string(i) + "-worker-1");
    if (pod.ok()) SetStatus(client, *pod, "Failed", 137);
  }
  double restart_s = Converge(client, jobs, 1, t1);
  uint64_t reconciles = reconcile_count();
  double mean_ms = reconcile_seconds() / static_cast<double>(reconciles) * 1e3;
  std::printf("jobs: %d (4 pods each)\n", jobs);
  std::printf(
      "create -> all Running: %.2f s (%.0f jobs/s); %.1f reconciles and %.1f API writes per job\n",
      start_s, jobs / start_s, static_cast<double>(start_reconciles) / jobs,
      static_cast<double>(start_writes) / jobs);
  std::printf("worker failure -> group restart -> all Running again: %.2f s\n", restart_s);
  std::printf("reconciles: %llu, mean latency %.3f ms\n",
              static_cast<unsigned long long>(reconciles), mean_ms);
  std::printf("process RSS (API server, caches, controller): %.1f MiB\n", RssMiB());
  return 0;
}
