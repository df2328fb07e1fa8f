// lockstep-operator: the TrainingJob controller as a process. Connects to the API server,
// optionally campaigns for the leader Lease, serves /metrics, /healthz and /readyz, and
// reconciles until SIGTERM or SIGINT, after which it finishes the reconciles in flight,
// releases the Lease and exits 0.
#include <malloc.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <thread>

#include "common/http_endpoints.h"
#include "common/log.h"
#include "common/str_util.h"
#include "operator/cmd/lockstep-operator/operator_flags.h"
#include "operator/kube/connect.h"
#include "operator/kube/kube_config.h"
#include "operator/kube/rate_limiter.h"
#include "operator/runtime/api_metrics.h"
#include "operator/runtime/leader_election.h"
#include "operator/trainingjob/controller.h"

namespace {

volatile std::sig_atomic_t g_signalled = 0;
void OnSignal(int) { g_signalled = 1; }

// The Lease holder's name: the pod's name (POD_NAME, set by the chart), else the host name, and a
// random suffix so that a restarted process is a new holder.
std::string Identity() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const char* pod = std::getenv("POD_NAME");
  std::random_device rd;
  return lockstep::StrCat(pod && *pod ? std::string(pod) : std::string(host), "_", rd() & 0xffffff);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lockstep;
  // glibc gives each thread that allocates an arena of its own, up to 8 per core, and each
  // keeps its freed memory: the informers, workers and writers would hold about 5 MiB apart
  // at 5,000 jobs. Two arenas are plenty for a process that waits on the network.
  mallopt(M_ARENA_MAX, 2);
  absl::StatusOr<cmd::OperatorFlags> flags =
      cmd::ParseOperatorFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) {
    std::cerr << "lockstep-operator: " << flags.status().message() << "\n";
    return 2;
  }
  if (flags->help) {
    std::cout << cmd::OperatorUsage();
    return 0;
  }
  if (flags->version) {
    std::cout << "lockstep-operator " << LOCKSTEP_VERSION << "\n";
    return 0;
  }
  if (flags->json_logs) common::SetLogFormat(common::LogFormat::kJson);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  absl::StatusOr<kube::RestConfig> config = kube::DefaultConfig(flags->kubeconfig, flags->context);
  if (!config.ok()) {
    common::LogError("operator", "cannot configure the API client: ", config.status().message());
    return 1;
  }
  std::unique_ptr<common::Clock> clock = common::NewRealClock();
  absl::StatusOr<std::shared_ptr<kube::Transport>> transport = kube::Connect(*config, clock.get());
  if (!transport.ok()) {
    common::LogError("operator", "cannot connect: ", transport.status().message());
    return 1;
  }
  common::MetricsRegistry metrics;
  common::AddProcessMetrics(&metrics);
  auto instrumented = std::make_shared<runtime::InstrumentedTransport>(*transport, &metrics);
  // SIGTERM or SIGINT: the controller takes no more keys, its calls stop waiting for the
  // throttle, the reconciles in flight finish, and the Lease is released.
  std::stop_source stop;
  kube::RestClient client(
      instrumented,
      {.user_agent = StrCat("lockstep-operator/", LOCKSTEP_VERSION),
       .throttle = std::make_shared<kube::TokenBucket>(flags->qps, flags->burst, clock.get()),
       .stop = stop.get_token()});

  std::unique_ptr<trainingjob::ProgressSource> progress = trainingjob::NewHttpProgressSource();
  const trainingjob::ControllerOptions options{
      .namespace_ = flags->namespace_,
      .workers = flags->workers,
      .reconciler = {.planner = {.desired = {.cluster_domain = flags->cluster_domain,
                                             .gang = flags->gang}}},
      .progress = {.interval = flags->progress_interval},
      .events = {.qps = flags->event_qps, .burst = flags->event_burst}};
  trainingjob::TrainingJobController controller(&client, clock.get(), &metrics, progress.get(),
                                                options);
  // With --tfjob, the served TFJobs' controller runs beside it, under the same Lease.
  std::optional<trainingjob::TrainingJobController> tfjobs;
  if (flags->tfjob) {
    trainingjob::ControllerOptions o = options;
    o.tfjobs = true;
    tfjobs.emplace(&client, clock.get(), &metrics, progress.get(), std::move(o));
  }
  // Runs the controllers until `stop`.
  auto run = [&controller, &tfjobs](std::stop_token until) {
    std::jthread tfjob_thread;
    if (tfjobs) tfjob_thread = std::jthread([&tfjobs, until] { tfjobs->Run(until); });
    controller.Run(until);
  };

  std::string lease_ns = flags->leader_election_namespace;
  if (lease_ns.empty()) {
    const char* pod_ns = std::getenv("POD_NAMESPACE");
    lease_ns = pod_ns != nullptr && *pod_ns != '\0' ? pod_ns : "default";
  }
  runtime::LeaderElector elector(
      &client, {.namespace_ = lease_ns, .name = flags->leader_election_id, .identity = Identity()},
      clock.get());
  metrics.AddGauge("lockstep_leader", "1 while this replica leads.");
  metrics.AddCollector([&](common::MetricsRegistry& m) {
    m.Set("lockstep_leader", {}, !flags->leader_elect || elector.IsLeader() ? 1 : 0);
  });

  std::unique_ptr<common::EndpointServer> endpoints;
  if (!flags->metrics_addr.empty()) {
    absl::StatusOr<std::unique_ptr<common::EndpointServer>> s = common::EndpointServer::Start(
        flags->metrics_addr, [&](const std::string& path) -> common::EndpointResponse {
          if (path == "/metrics") {
            return {200, "text/plain; version=0.0.4; charset=utf-8", metrics.Render()};
          }
          if (path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
          if (path == "/readyz") {
            // A standby replica is ready: it is healthy and waiting for the Lease.
            if (controller.Ready() && (!tfjobs || tfjobs->Ready())) {
              return {200, "text/plain; charset=utf-8", "ok\n"};
            }
            if (flags->leader_elect && !elector.IsLeader()) {
              return {200, "text/plain; charset=utf-8", "ok (standby)\n"};
            }
            return {503, "text/plain; charset=utf-8", "caches not synced\n"};
          }
          return {404, "text/plain; charset=utf-8", "not found\n"};
        });
    if (!s.ok()) {
      common::LogError("operator", "metrics endpoint: ", s.status().message());
      return 1;
    }
    endpoints = std::move(*s);
    common::LogInfo("operator", "serving /metrics, /healthz and /readyz on port ",
                    endpoints->port());
  }

  std::jthread watch_signals([&stop, &controller](std::stop_token st) {
    // Freed heap stays resident after a burst of work (the creates of thousands of jobs parse
    // and free megabytes of JSON) until it is handed back: the operator does that once its
    // queue has been empty for a second after work, at most every 10 s.
    int idle_ticks = 0, since_trim = 0;  // ticks of 100 ms
    bool worked = false;
    while (!st.stop_requested() && !g_signalled) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ++since_trim;
      if (controller.QueueDepth() > 0) {
        worked = true;
        idle_ticks = 0;
      } else if (++idle_ticks >= 10 && worked && since_trim >= 100) {
        malloc_trim(0);
        worked = false;
        since_trim = 0;
      }
    }
    stop.request_stop();
  });
  common::LogInfo("operator", "lockstep-operator ", LOCKSTEP_VERSION, " starting; namespace ",
                  flags->namespace_.empty() ? "(all)" : flags->namespace_);
  if (flags->leader_elect) {
    elector.Run(stop.get_token(), [&](std::stop_token lead) { run(lead); });
    if (!stop.stop_requested()) {
      // Leadership lost without being asked to stop: exit so that the Deployment restarts
      // this replica as a fresh candidate (the caches it held may be behind the new leader's).
      common::LogError("operator", "lost the leader Lease; exiting");
      watch_signals.request_stop();
      return 1;
    }
  } else {
    run(stop.get_token());
  }
  common::LogInfo("operator", "stopped");
  watch_signals.request_stop();
  return 0;
}
