// The local API server under load: 5,000 pods across 500 TrainingJobs in 10 namespaces,
// created one after another by one client while 3 watchers follow every pod. Reports create
// latency (p50/p99), watch delivery latency (from the create's answer to each watcher's
// receipt, p50/p99) and the server's resident memory. The server runs as `lockstep local
// serve --no-runner --no-controller` with a durable state directory: the API server alone (an
// in-process controller would reconcile the benchmark's TrainingJobs and make pods of the same
// names). Every create must succeed and the final list must hold every pod, or the run fails.
// The figures are compared with this machine's baseline in bench/results/ (baseline.h); a
// figure 1.5x worse is flagged and the run exits 3. --record-baseline records the run instead.
// Usage: local_api_bench LOCKSTEP_BINARY [PODS] [--machine NAME] [--record-baseline |
//                        --no-baseline]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "bench/baseline.h"
#include "bench/bench_util.h"
#include "operator/api/manifest.h"
#include "operator/kube/cpprest_transport.h"
#include "operator/kube/rest_client.h"

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace kube = lockstep::kube;

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string machine;
  bool compare = true;
  lockstep::bench::BaselineOptions baseline;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--no-baseline" || args[i] == "--record-baseline") {
      if (args[i] == "--no-baseline") compare = false;
      if (args[i] == "--record-baseline") baseline.record = true;
      args.erase(args.begin() + static_cast<long>(i--));
    } else if (args[i] == "--machine" && i + 1 < args.size()) {
      machine = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      --i;
    }
  }
  if (args.empty()) {
    std::fprintf(stderr,
                 "usage: %s LOCKSTEP_BINARY [PODS] [--machine NAME] [--record-baseline | "
                 "--no-baseline]\n",
                 argv[0]);
    return 2;
  }
  const std::string binary = args[0];
  const int pods = args.size() > 1 ? std::atoi(args[1].c_str()) : 5000;
  const int jobs = std::max(1, pods / 10), namespaces = 10, watchers = 3;
  std::string dir =
      std::filesystem::temp_directory_path() / ("lockstep-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  pid_t server = lockstep::bench::Spawn(
      {binary, "local", "serve", "--no-runner", "--no-controller", "--state-dir", dir},
      dir + "/server.log");
  std::string url = lockstep::bench::AwaitServerUrl(dir);
  if (url.empty()) {
    std::fprintf(stderr, "the server did not start\n");
    return 1;
  }
  auto transport =
      std::shared_ptr<kube::Transport>(kube::NewHttpTransport({.server = url}).value());
  kube::RestClient client(transport);
  for (int n = 0; n < namespaces; ++n) {
    (void)client.Create(kube::resources::kNamespaces, "",
                        {{"metadata", {{"name", "team-" + std::to_string(n)}}}});
  }
  std::string start_rv =
      client.List(kube::resources::kPods, "").value()["metadata"]["resourceVersion"];

  // Watchers: the time each pod's ADDED event arrived, per watcher.
  std::mutex mu;
  std::map<std::string, Clock::time_point> sent;  // when each create was sent
  std::vector<double> delivery_ms;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < watchers; ++w) {
    threads.emplace_back([&] {
      auto stream = client.Watch(kube::resources::kPods, "",
                                 {.resource_version = start_rv, .timeout_seconds = 3600});
      if (!stream.ok()) return;
      int seen = 0;
      while (seen < pods) {
        auto e = (*stream)->Next();
        if (!e.ok() || !e->has_value()) break;
        if ((**e).type != kube::WatchEvent::Type::kAdded) continue;
        auto now = Clock::now();
        std::string key = (**e).object["metadata"]["namespace"].get<std::string>() + "/" +
                          (**e).object["metadata"]["name"].get<std::string>();
        ++seen;
        std::lock_guard lock(mu);
        auto it = sent.find(key);
        if (it != sent.end()) {
          delivery_ms.push_back(
              std::chrono::duration<double, std::milli>(now - it->second).count());
        }
      }
      ++done;
    });
  }

  std::vector<double> create_ms;
  int failed = 0;
  auto t0 = Clock::now();
  for (int j = 0; j < jobs; ++j) {
    std::string ns = "team-" + std::to_string(j % namespaces);
    std::string job = "job-" + std::to_string(j);
    json container = {{"name", "lockstep"}, {"image", "lockstep/trainer:0.1.0"}};
    json tj = {{"apiVersion", "lockstep.io/v1alpha1"}, {"kind", "TrainingJob"}};
    tj["metadata"]["name"] = job;
    tj["spec"]["replicaSpecs"]["Worker"]["replicas"] = 10;
    tj["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
        json::array({container});
    auto created = client.Create(kube::resources::kTrainingJobs, ns, tj);
    std::string uid = created.ok() ? (*created)["metadata"]["uid"].get<std::string>() : "";
    for (int i = 0; i < pods / jobs; ++i) {
      std::string name = job + "-worker-" + std::to_string(i);
      json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}};
      pod["metadata"]["name"] = name;
      pod["metadata"]["labels"] = {{"lockstep.io/job-name", job},
                                   {"lockstep.io/replica-index", std::to_string(i)}};
      json owner = {{"apiVersion", "lockstep.io/v1alpha1"},
                    {"kind", "TrainingJob"},
                    {"name", job},
                    {"uid", uid},
                    {"controller", true}};
      pod["metadata"]["ownerReferences"] = json::array({owner});
      json c = container;
      c["args"] = json::array({"--model=mlp"});
      pod["spec"]["containers"] = json::array({c});
      auto before = Clock::now();
      {
        std::lock_guard lock(mu);
        sent[ns + "/" + name] = before;
      }
      auto r = client.Create(kube::resources::kPods, ns, pod);
      auto after = Clock::now();
      if (!r.ok()) {
        std::fprintf(stderr, "create failed: %s\n", std::string(r.status().message()).c_str());
        ++failed;
        continue;
      }
      create_ms.push_back(std::chrono::duration<double, std::milli>(after - before).count());
    }
  }
  double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (std::thread& t : threads) t.join();
  long rss = lockstep::bench::RssKb(server);
  auto list_t = Clock::now();
  auto all = client.ListAll(kube::resources::kPods, "", {.limit = 500});
  double list_ms = std::chrono::duration<double, std::milli>(Clock::now() - list_t).count();
  std::printf("objects: %d pods, %d TrainingJobs, %d namespaces; %d watchers followed every pod\n",
              static_cast<int>(create_ms.size()), jobs, namespaces, done.load());
  std::printf(
      "create latency: p50 %.2f ms, p99 %.2f ms (%.0f creates/s, one client, fsync per write)\n",
      lockstep::bench::Percentile(create_ms, 0.5), lockstep::bench::Percentile(create_ms, 0.99),
      static_cast<double>(create_ms.size()) / total_s);
  std::printf("watch delivery latency: p50 %.2f ms, p99 %.2f ms over %zu deliveries\n",
              lockstep::bench::Percentile(delivery_ms, 0.5),
              lockstep::bench::Percentile(delivery_ms, 0.99), delivery_ms.size());
  std::printf("list of all pods (pages of 500): %.1f ms for %zu pods\n", list_ms,
              all.ok() ? (*all)["items"].size() : 0);
  std::printf("server RSS: %.1f MiB\n", static_cast<double>(rss) / 1024.0);
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  std::filesystem::remove_all(dir);
  const size_t listed = all.ok() ? (*all)["items"].size() : 0;
  const int expected = jobs * (pods / jobs);
  if (failed > 0 || listed != static_cast<size_t>(expected) || done.load() != watchers) {
    std::printf(
        "FAILED: %d creates failed, %zu of %d pods listed, %d of %d watchers saw every pod\n",
        failed, listed, expected, done.load(), watchers);
    return 1;
  }
  if (!compare) return 0;
  int flagged = lockstep::bench::CompareWithBaseline(
      lockstep::bench::BaselinePath("local_api_bench", lockstep::bench::MachineName(machine)),
      "pods=" + std::to_string(expected),
      {{"create_p50_ms", lockstep::bench::Percentile(create_ms, 0.5)},
       {"create_p99_ms", lockstep::bench::Percentile(create_ms, 0.99)},
       {"creates_per_s", static_cast<double>(create_ms.size()) / total_s, false},
       {"watch_p50_ms", lockstep::bench::Percentile(delivery_ms, 0.5)},
       {"watch_p99_ms", lockstep::bench::Percentile(delivery_ms, 0.99)},
       {"list_ms", list_ms},
       {"server_rss_mib", static_cast<double>(rss) / 1024.0}},
      baseline);
  return flagged > 0 ? 3 : 0;
}
