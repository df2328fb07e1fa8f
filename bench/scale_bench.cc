// The operator at scale against `lockstep local serve --simulate-pods` (pods are bound and run
// on a schedule, no processes): JOBS MultiWorkerMirrored TrainingJobs of 4 replicas (chief + 3
// workers) are created at once by 4 client threads; then worker 1 of every job is failed with
// exit code 137 (by the simulator's annotation) and every job recovers in place. Measured:
//  - time from create to Running per job (p50, p99, max) and for all of them; pods created/s;
//  - time from the failure to the replacement pod Running, per job and for all;
//  - the controller's resident memory, peak and steady (its queue idle for 11 s);
//  - reconcile latency p50/p99 from its own histogram, and the client-side throttle waits
//    from theirs (lockstep_reconcile_throttle_wait_seconds), apart;
//  - API requests per job by verb (the controller's lockstep_api_request_duration_seconds);
//  - the controller's CPU time over the run (user and system);
//  - with the separate binary: how long SIGTERM takes to stop it, and whether its Lease is free.
// The controller is the separate lockstep-operator binary (--operator), with its defaults unless
// --qps/--burst are given, or the controller inside `lockstep local serve` (--in-process; its
// memory is then the whole server's). The server's state directory is on /dev/shm when there is
// one: this measures the operator, not the disk's fsync. Each run is compared with this
// machine's baseline in bench/results/ (baseline.h); --record-baseline records it instead.
// Usage: scale_bench --lockstep BIN (--operator BIN | --in-process) [--jobs N] [--qps Q]
//                    [--burst B] [--machine NAME] [--record-baseline | --no-baseline]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
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
#include <sstream>
#include <thread>
#include <utility>

#include "bench/baseline.h"
#include "bench/bench_util.h"
#include "operator/kube/cpprest_transport.h"
#include "operator/kube/rest_client.h"

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
namespace kube = lockstep::kube;
namespace res = lockstep::kube::resources;
namespace fs = std::filesystem;

namespace {

constexpr char kNamespace[] = "scale";

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// GET of a plain-text endpoint; "" on failure.
std::string Fetch(const std::string& base, const std::string& path) {
  absl::StatusOr<std::unique_ptr<kube::Transport>> t =
      kube::NewHttpTransport({.server = base, .connect_timeout = absl::Seconds(2)});
  if (!t.ok()) return "";
  absl::StatusOr<kube::HttpResponse> r = (*t)->Send({.target = path, .timeout = absl::Seconds(10)});
  return r.ok() && r->status == 200 ? r->body : "";
}

// One metric sample of Prometheus text: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> ParseMetrics(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t brace = line.find('{'), space = line.rfind(' ');
    if (space == std::string::npos) continue;
    s.name = line.substr(0, std::min(brace, space));
    if (brace != std::string::npos && brace < space) {
      std::string labels = line.substr(brace + 1, line.find('}') - brace - 1);
      size_t pos = 0;
      while (pos < labels.size()) {
        size_t eq = labels.find('=', pos);
        size_t end = labels.find('"', eq + 2);
        if (eq == std::string::npos || end == std::string::npos) break;
        s.labels[labels.substr(pos, eq - pos)] = labels.substr(eq + 2, end - eq - 2);
        pos = end + 2;
      }
    }
    s.value = std::atof(line.c_str() + space + 1);
    out.push_back(std::move(s));
  }
  return out;
}

// The q-quantile of a histogram, summed over its label sets, interpolated within a bucket.
double HistogramQuantile(const std::vector<Sample>& samples, const std::string& name, double q,
                         const std::map<std::string, std::string>& match = {}) {
  std::map<double, double> cumulative;  // le -> count
  for (const Sample& s : samples) {
    if (s.name != name + "_bucket") continue;
    if (!std::all_of(match.begin(), match.end(), [&](const auto& kv) {
          auto it = s.labels.find(kv.first);
          return it != s.labels.end() && it->second == kv.second;
        })) {
      continue;
    }
    auto le = s.labels.find("le");
    if (le == s.labels.end()) continue;
    double bound = le->second == "+Inf" ? 1e300 : std::atof(le->second.c_str());
    cumulative[bound] += s.value;
  }
  if (cumulative.empty() || cumulative.rbegin()->second == 0) return 0;
  double rank = q * cumulative.rbegin()->second;
  double lower = 0, below = 0;
  for (const auto& [bound, count] : cumulative) {
    if (count >= rank) {
      if (bound >= 1e300) return lower;
      double in_bucket = count - below;
      return in_bucket <= 0 ? bound : lower + (bound - lower) * (rank - below) / in_bucket;
    }
    lower = bound;
    below = count;
  }
  return lower;
}

double Total(const std::vector<Sample>& samples, const std::string& name,
             const std::map<std::string, std::string>& match = {}) {
  double sum = 0;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool ok = std::all_of(match.begin(), match.end(), [&](const auto& kv) {
      auto it = s.labels.find(kv.first);
      return it != s.labels.end() && it->second == kv.second;
    });
    if (ok) sum += s.value;
  }
  return sum;
}

// Runs `fn(i)` for i in [0, n) on `threads` threads.
void Parallel(int n, int threads, const std::function<void(int)>& fn) {
  std::atomic<int> next{0};
  std::vector<std::jthread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i; (i = next++) < n;) fn(i);
    });
  }
}

// What the watches saw, by job index.
struct Observed {
  std::mutex mu;
  std::vector<std::optional<SteadyClock::time_point>> running;    // the job's first Running
  std::vector<std::string> failed_uid;                            // worker 1 as failed
  std::vector<std::optional<SteadyClock::time_point>> recovered;  // its replacement Running
  std::optional<SteadyClock::time_point> first_pod, last_pod;
  int pods_added = 0;
  int running_jobs = 0, recovered_jobs = 0;
  int watching = 0;  // watches open

  // Waits (30 min at most) until `*count` reaches `want`; false on the limit.
  bool AwaitCount(const int* count, int want);
};

int JobIndex(const std::string& name) {
  if (name.rfind("job-", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

// Follows `resource` in the benchmark's namespace until `stop`, resuming a broken watch where
// it left off; `on` gets each event but bookmarks.
void Follow(kube::RestClient& client, const kube::Resource& resource, Observed& o,
            std::stop_token stop,
            const std::function<void(kube::WatchEvent::Type, const json&)>& on) {
  std::string rv;
  bool opened = false;
  while (!stop.stop_requested()) {
    auto stream =
        client.Watch(resource, kNamespace, {.resource_version = rv, .timeout_seconds = 3600});
    if (!stream.ok()) continue;
    if (!std::exchange(opened, true)) {
      std::lock_guard lock(o.mu);
      ++o.watching;
    }
    std::stop_callback cancel(stop, [&] { (*stream)->Cancel(); });
    while (true) {
      auto e = (*stream)->Next();
      if (!e.ok() || !e->has_value()) break;
      rv = (**e).object["metadata"].value("resourceVersion", rv);
      if ((**e).type != kube::WatchEvent::Type::kBookmark) on((**e).type, (**e).object);
    }
  }
}

// Each job's first Running.
void WatchJobs(kube::RestClient& client, Observed& o, std::stop_token stop) {
  Follow(client, res::kTrainingJobs, o, stop, [&](kube::WatchEvent::Type, const json& j) {
    int i = JobIndex(j["metadata"].value("name", ""));
    std::string state = j.value("/status/state"_json_pointer, "");
    std::lock_guard lock(o.mu);
    if (i >= 0 && i < static_cast<int>(o.running.size()) && state == "Running" && !o.running[i]) {
      o.running[i] = SteadyClock::now();
      ++o.running_jobs;
    }
  });
}

// Pods created, and each failed worker's replacement Running.
void WatchPods(kube::RestClient& client, Observed& o, std::stop_token stop) {
  Follow(client, res::kPods, o, stop, [&](kube::WatchEvent::Type type, const json& p) {
    auto now = SteadyClock::now();
    std::lock_guard lock(o.mu);
    if (type == kube::WatchEvent::Type::kAdded) {
      ++o.pods_added;
      if (!o.first_pod) o.first_pod = now;
      o.last_pod = now;
    }
    std::string name = p["metadata"].value("name", "");
    size_t cut = name.rfind("-worker-1");
    if (cut == std::string::npos || cut + 9 != name.size()) return;
    int i = JobIndex(name.substr(0, cut));
    if (i < 0 || i >= static_cast<int>(o.recovered.size()) || o.failed_uid[i].empty() ||
        o.recovered[i]) {
      return;
    }
    if (p["metadata"].value("uid", "") != o.failed_uid[i] &&
        p.value("/status/phase"_json_pointer, "") == "Running") {
      o.recovered[i] = now;
      ++o.recovered_jobs;
    }
  });
}

// Waits until `done()` or `limit`; false on the limit.
bool Await(const std::function<bool()>& done, std::chrono::seconds limit) {
  auto deadline = SteadyClock::now() + limit;
  while (!done()) {
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool Observed::AwaitCount(const int* count, int want) {
  return Await(
      [&] {
        std::lock_guard lock(mu);
        return *count >= want;
      },
      std::chrono::seconds(1800));
}

}  // namespace

int main(int argc, char** argv) {
  std::string lockstep, operator_binary, qps, burst;
  std::string machine;
  bool compare = true;
  lockstep::bench::BaselineOptions baseline;
  bool in_process = false;
  int jobs = 100;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--lockstep") {
      lockstep = value();
    } else if (a == "--operator") {
      operator_binary = value();
    } else if (a == "--in-process") {
      in_process = true;
    } else if (a == "--jobs") {
      jobs = std::atoi(value().c_str());
    } else if (a == "--qps") {
      qps = value();
    } else if (a == "--burst") {
      burst = value();
    } else if (a == "--machine") {
      machine = value();
    } else if (a == "--record-baseline") {
      baseline.record = true;
    } else if (a == "--no-baseline") {
      compare = false;
    } else {
      std::fprintf(stderr, "scale_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (lockstep.empty() || (operator_binary.empty() && !in_process) || jobs < 1) {
    std::fprintf(stderr,
                 "usage: scale_bench --lockstep BIN (--operator BIN | --in-process) [--jobs N] "
                 "[--qps Q] [--burst B] [--machine NAME] [--record-baseline | --no-baseline]\n");
    return 2;
  }
  fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  std::string dir = base / ("lockstep-scale-" + std::to_string(::getpid()));
  fs::create_directories(dir);

  std::vector<std::string> serve = {
      lockstep, "local",       "serve", "--simulate-pods", "--simulate-start-delay",
      "1s",     "--state-dir", dir};
  if (!in_process) serve.push_back("--no-controller");
  pid_t server = lockstep::bench::Spawn(serve, dir + "/server.log");
  std::string url = lockstep::bench::AwaitServerUrl(dir);
  if (url.empty()) {
    std::fprintf(stderr, "the server did not start (see %s/server.log)\n", dir.c_str());
    return 1;
  }
  auto transport =
      std::shared_ptr<kube::Transport>(kube::NewHttpTransport({.server = url}).value());
  kube::RestClient client(transport);
  (void)client.Create(res::kNamespaces, "", {{"metadata", {{"name", kNamespace}}}});

  pid_t controller = server;
  std::string metrics_base = url;
  if (!in_process) {
    uint16_t port = FreePort();
    std::vector<std::string> args = {operator_binary, "--kubeconfig=" + dir + "/kubeconfig",
                                     "--metrics-addr=127.0.0.1:" + std::to_string(port),
                                     "--leader-elect", "--leader-election-namespace=default"};
    if (!qps.empty()) args.push_back("--qps=" + qps);
    if (!burst.empty()) args.push_back("--burst=" + burst);
    controller = lockstep::bench::Spawn(args, dir + "/operator.log");
    metrics_base = "http://127.0.0.1:" + std::to_string(port);
    if (!Await([&] { return Fetch(metrics_base, "/readyz") == "ok\n"; },
               std::chrono::seconds(60))) {
      std::fprintf(stderr, "the operator did not become ready (see %s/operator.log)\n",
                   dir.c_str());
      return 1;
    }
  }

  std::atomic<long> peak_kb{0};
  std::jthread sampler([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      long kb = lockstep::bench::RssKb(controller);
      if (kb > peak_kb) peak_kb = kb;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  Observed o;
  o.running.resize(jobs);
  o.recovered.resize(jobs);
  o.failed_uid.resize(jobs);
  std::jthread job_watch([&](std::stop_token s) { WatchJobs(client, o, s); });
  std::jthread pod_watch([&](std::stop_token s) { WatchPods(client, o, s); });
  if (!o.AwaitCount(&o.watching, 2)) {
    std::fprintf(stderr, "the watches did not open\n");
    return 1;
  }

  // Create every job at once.
  std::vector<SteadyClock::time_point> created(jobs);
  auto t0 = SteadyClock::now();
  std::atomic<int> create_failures{0};
  Parallel(jobs, 4, [&](int i) {
    created[i] = SteadyClock::now();
    if (!client
             .Create(
                 res::kTrainingJobs, kNamespace,
                 lockstep::bench::MultiWorkerMirroredJob("job-" + std::to_string(i), kNamespace))
             .ok())
      ++create_failures;
  });
  double create_s = Seconds(t0, SteadyClock::now());
  bool all_running = o.AwaitCount(&o.running_jobs, jobs);
  auto t_running = SteadyClock::now();
  std::vector<double> to_running;
  double pods_per_s = 0;
  {
    std::lock_guard lock(o.mu);
    for (int i = 0; i < jobs; ++i) {
      if (o.running[i]) to_running.push_back(Seconds(created[i], *o.running[i]));
    }
    if (o.first_pod && o.last_pod && *o.last_pod > *o.first_pod) {
      pods_per_s = (o.pods_added - 1) / Seconds(*o.first_pod, *o.last_pod);
    }
  }
  // Steady: the work queue empty for 11 s in a row. lockstep-operator hands freed heap back
  // to the system within 10 s of its queue going idle (malloc_trim, at most every 10 s), so a
  // shorter wait measures whether the last trim happened to fall before it.
  int quiet = 0;
  for (int i = 0; i < 900 && quiet < 110; ++i) {
    std::vector<Sample> m = ParseMetrics(Fetch(metrics_base, "/metrics"));
    quiet = Total(m, "lockstep_workqueue_depth") == 0 ? quiet + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double steady_mib = static_cast<double>(lockstep::bench::RssKb(controller)) / 1024.0;
  std::vector<Sample> after_create = ParseMetrics(Fetch(metrics_base, "/metrics"));

  // Fail worker 1 of every job.
  auto t1 = SteadyClock::now();
  std::vector<SteadyClock::time_point> failed_at(jobs);
  Parallel(jobs, 4, [&](int i) {
    std::string pod = "job-" + std::to_string(i) + "-worker-1";
    absl::StatusOr<json> got = client.Get(res::kPods, kNamespace, pod);
    if (!got.ok()) return;
    {
      std::lock_guard lock(o.mu);
      o.failed_uid[i] = (*got)["metadata"].value("uid", "");
    }
    failed_at[i] = SteadyClock::now();
    (void)client.Patch(res::kPods, kNamespace, pod, kube::PatchType::kMerge,
                       {{"metadata",
                         {{"annotations",
                           {{"lockstep.io/simulate-exit-after", "0s"},
                            {"lockstep.io/simulate-exit-code", "137"}}}}}});
  });
  bool all_recovered = o.AwaitCount(&o.recovered_jobs, jobs);
  auto t_recovered = SteadyClock::now();
  std::vector<double> to_recover;
  {
    std::lock_guard lock(o.mu);
    for (int i = 0; i < jobs; ++i) {
      if (o.recovered[i]) to_recover.push_back(Seconds(failed_at[i], *o.recovered[i]));
    }
  }
  std::vector<Sample> m = ParseMetrics(Fetch(metrics_base, "/metrics"));
  const double cpu_s = lockstep::bench::CpuSeconds(controller);
  sampler.request_stop();
  sampler.join();
  const double peak_mib = static_cast<double>(peak_kb.load()) / 1024.0;

  // Stop the operator as Kubernetes would, and see whether it let its Lease go.
  double stop_s = 0;
  std::string lease_holder = "(not checked)";
  if (!in_process) {
    auto ts = SteadyClock::now();
    ::kill(controller, SIGTERM);
    ::waitpid(controller, nullptr, 0);
    stop_s = Seconds(ts, SteadyClock::now());
    absl::StatusOr<json> lease = client.Get(res::kLeases, "default", "lockstep-operator");
    lease_holder =
        lease.ok() ? lease->value("/spec/holderIdentity"_json_pointer, "") : "(no Lease)";
    if (lease_holder.empty()) lease_holder = "(released)";
  }
  job_watch.request_stop();
  pod_watch.request_stop();
  job_watch.join();
  pod_watch.join();
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  fs::remove_all(dir);

  const char* reconcile = "lockstep_reconcile_duration_seconds";
  const char* waits = "lockstep_reconcile_throttle_wait_seconds";
  double reconciles = Total(m, std::string(reconcile) + "_count");
  std::printf("controller: %s%s%s\n",
              in_process ? "in-process (lockstep local serve)" : "lockstep-operator",
              qps.empty() ? "" : (" --qps=" + qps).c_str(),
              burst.empty() ? "" : (" --burst=" + burst).c_str());
  std::printf("jobs: %d of 4 replicas (%d pods); %d creates failed; creates took %.2f s\n", jobs,
              jobs * 4, create_failures.load(), create_s);
  std::printf("create -> Running: p50 %.2f s, p99 %.2f s, all %s%.2f s; pods created %.0f/s\n",
              lockstep::bench::Percentile(to_running, 0.5),
              lockstep::bench::Percentile(to_running, 0.99),
              all_running ? "" : "NOT ALL RUNNING after ", Seconds(t0, t_running), pods_per_s);
  std::printf("worker 1 failed -> replacement Running: p50 %.2f s, p99 %.2f s, all %s%.2f s\n",
              lockstep::bench::Percentile(to_recover, 0.5),
              lockstep::bench::Percentile(to_recover, 0.99),
              all_recovered ? "" : "NOT ALL RECOVERED after ", Seconds(t1, t_recovered));
  std::printf("%s resident memory: peak %.1f MiB, steady %.1f MiB (%.1f KiB per pod)\n",
              in_process ? "server" : "operator", peak_mib, steady_mib,
              steady_mib * 1024.0 / (jobs * 4));
  std::printf("%s CPU time: %.1f s (%.2f ms per job)\n", in_process ? "server" : "operator", cpu_s,
              cpu_s * 1e3 / jobs);
  std::printf(
      "reconciles: %.0f (%.1f per job); latency p50 %.2f ms, p99 %.2f ms; throttle wait "
      "p50 %.1f ms, p99 %.1f ms\n",
      reconciles, reconciles / jobs, HistogramQuantile(m, reconcile, 0.5) * 1e3,
      HistogramQuantile(m, reconcile, 0.99) * 1e3, HistogramQuantile(m, waits, 0.5) * 1e3,
      HistogramQuantile(m, waits, 0.99) * 1e3);
  // The operator's own part: reconciles that sent nothing wait on no API round trip.
  const std::map<std::string, std::string> none = {{"writes", "none"}};
  std::printf("reconciles that wrote nothing: %.0f; latency p50 %.2f ms, p99 %.2f ms\n",
              Total(m, std::string(reconcile) + "_count", none),
              HistogramQuantile(m, reconcile, 0.5, none) * 1e3,
              HistogramQuantile(m, reconcile, 0.99, none) * 1e3);
  const char* api = "lockstep_api_request_duration_seconds";
  std::printf(
      "API latency as the controller saw it: POST p50 %.2f ms, p99 %.2f ms; PUT p50 %.2f "
      "ms, p99 %.2f ms\n",
      HistogramQuantile(m, api, 0.5, {{"verb", "POST"}}) * 1e3,
      HistogramQuantile(m, api, 0.99, {{"verb", "POST"}}) * 1e3,
      HistogramQuantile(m, api, 0.5, {{"verb", "PUT"}}) * 1e3,
      HistogramQuantile(m, api, 0.99, {{"verb", "PUT"}}) * 1e3);
  std::printf("API requests per job by verb (create phase / whole run):");
  std::vector<lockstep::bench::Figure> figures;
  for (const char* verb : {"POST", "PUT", "PATCH", "DELETE", "GET", "WATCH"}) {
    double c = Total(after_create, "lockstep_api_request_duration_seconds_count", {{"verb", verb}});
    double w = Total(m, "lockstep_api_request_duration_seconds_count", {{"verb", verb}});
    std::printf(" %s %.2f/%.2f", verb, c / jobs, w / jobs);
    figures.push_back({std::string("requests_per_job_") + verb, w / jobs, true, 0.1});
  }
  std::printf(
      "\nevents: %.0f created, %.0f updated, %.0f dropped by the spam filter, %.0f by a full "
      "queue\n",
      Total(m, "lockstep_events_total", {{"outcome", "created"}}),
      Total(m, "lockstep_events_total", {{"outcome", "updated"}}),
      Total(m, "lockstep_events_total", {{"outcome", "dropped_spam"}}),
      Total(m, "lockstep_events_total", {{"outcome", "dropped_queue_full"}}));
  if (!in_process) {
    std::printf("SIGTERM -> exit: %.2f s; Lease holder afterwards: %s\n", stop_s,
                lease_holder.c_str());
  }
  if (!all_running || !all_recovered || create_failures > 0) return 1;
  if (!compare) return 0;
  figures.insert(figures.end(),
                 {{"all_running_s", Seconds(t0, t_running)},
                  {"running_p99_s", lockstep::bench::Percentile(to_running, 0.99)},
                  {"all_recovered_s", Seconds(t1, t_recovered)},
                  {"pods_per_s", pods_per_s, false},
                  {"peak_rss_mib", peak_mib},
                  {"steady_rss_mib", steady_mib},
                  {"cpu_s", cpu_s},
                  {"reconcile_p99_ms", HistogramQuantile(m, reconcile, 0.99) * 1e3}});
  std::string key = "jobs=" + std::to_string(jobs) + (in_process ? " in-process" : " operator") +
                    (qps.empty() ? "" : " qps=" + qps) + (burst.empty() ? "" : " burst=" + burst);
  return lockstep::bench::CompareWithBaseline(
             lockstep::bench::BaselinePath("scale_bench", lockstep::bench::MachineName(machine)),
             key, figures, baseline) > 0
             ? 3
             : 0;
}
