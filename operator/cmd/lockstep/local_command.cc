#include "operator/cmd/lockstep/local_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/metrics.h"
#include "common/str_util.h"
#include "operator/api/manifest.h"
#include "operator/kube/cpprest_transport.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/builtin_crds.h"
#include "operator/local/apiserver/http_server.h"
#include "operator/local/apiserver/local_transport.h"
#include "operator/local/controllers/deployments.h"
#include "operator/local/kubelet/pod_simulator.h"
#include "operator/local/kubelet/runner.h"
#include "operator/runtime/api_metrics.h"
#include "operator/trainingjob/controller.h"

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

constexpr char kLocalUsage[] =
    R"(usage: lockstep local COMMAND [--state-dir DIR] [--port N] [--audit-log FILE]

commands:
  up       start the local cluster in the background (prints how to point kubectl at it);
           --no-controller and --no-runner are passed on to serve
  down     stop it (its objects stay in the state directory for the next `up`)
  status   say whether it runs, and where
  serve    run the API server, the TrainingJob controller and the pod runner in the
           foreground (what `up` starts); --no-runner leaves pods unrun and --no-controller
           leaves TrainingJobs unreconciled (for benchmarks and tests of the parts alone,
           and for running lockstep-operator from the Helm chart's Deployment instead)

--simulate-pods runs no process: pods are bound and move Pending -> Running (after
--simulate-start-delay, default 1s) -> Succeeded (after --simulate-run-time; default 0s, which
runs them until deleted), each default delay jittered by 20%, with failures injected per pod by
the annotations lockstep.io/simulate-start-delay, -exit-after, -exit-code, -reason and
-message (for scale tests: thousands of pods on one machine). Passed on by `up` as well.

--tfjob also serves Kubeflow's kubeflow.org/v1 TFJob: its CRD is installed and a TFJob
controller runs beside the TrainingJob one, so a TFJob manifest applies unchanged (leave it off
where another controller owns TFJobs). Passed on by `up` as well.

--audit-log FILE appends one audit.k8s.io/v1 Event per API request (who, verb, resource,
response code) as a JSON line, as the Kubernetes API server's audit log at level Metadata.
)";

struct Options {
  std::string command;
  std::string state_dir;
  uint16_t port = 0;
  bool runner = true;      // serve --no-runner: the API server alone (benchmarks)
  bool controller = true;  // serve --no-controller: no TrainingJob controller in-process
  bool simulate = false;   // serve --simulate-pods: the PodSimulator instead of the runner
  bool tfjob = false;      // --tfjob: serve kubeflow.org/v1 TFJobs too
  local::PodSimulatorOptions simulation;  // --simulate-start-delay, --simulate-run-time
  std::string audit_log;
};

std::string DefaultStateDir() {
  if (const char* home = std::getenv("LOCKSTEP_HOME"); home && *home) return home;
  const char* home = std::getenv("HOME");
  return StrCat(home && *home ? home : "/tmp", "/.lockstep/local");
}

struct Running {
  pid_t pid = 0;
  std::string url;
};

// The server recorded in server.json, if that process is alive.
std::optional<Running> FindServer(const std::string& dir) {
  std::ifstream in(dir + "/server.json");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() || !j.contains("url") ||
      !j["url"].is_string()) {
    return std::nullopt;
  }
  Running r{j["pid"].get<pid_t>(), j["url"].get<std::string>()};
  if (r.pid <= 0 || ::kill(r.pid, 0) != 0) return std::nullopt;
  return r;
}

bool Healthy(const std::string& url) {
  absl::StatusOr<std::unique_ptr<kube::Transport>> t =
      kube::NewHttpTransport({.server = url, .connect_timeout = absl::Seconds(2)});
  if (!t.ok()) return false;
  absl::StatusOr<kube::HttpResponse> r =
      (*t)->Send({.target = "/healthz", .timeout = absl::Seconds(2)});
  return r.ok() && r->status == 200;
}

void WriteKubeconfig(const std::string& dir, const std::string& url) {
  std::ofstream(dir + "/kubeconfig")
      << "apiVersion: v1\nkind: Config\n"
      << "clusters:\n- name: lockstep-local\n  cluster:\n    server: " << url << "\n"
      << "users:\n- name: lockstep-local\n  user: {}\n"
      << "contexts:\n- name: lockstep-local\n  context:\n"
      << "    cluster: lockstep-local\n    user: lockstep-local\n"
      << "    namespace: default\n"
      << "current-context: lockstep-local\n";
}

// Set by SIGTERM/SIGINT; only an atomic flag and write() are safe in a signal handler. The
// byte written to the pipe wakes the thread that waits for the signal.
volatile std::sig_atomic_t g_signalled = 0;
int g_signal_pipe[2] = {-1, -1};
extern "C" void OnSignal(int) {
  g_signalled = 1;
  int saved = errno;
  if (g_signal_pipe[1] >= 0) (void)!::write(g_signal_pipe[1], "x", 1);
  errno = saved;
}

// Blocks until SIGTERM or SIGINT came.
void WaitForSignal() {
  while (!g_signalled) {
    char c;
    // A byte can also come from a pod process signalled between fork and exec, where it
    // still runs our handler: only the flag says the signal was ours.
    if (g_signal_pipe[0] < 0 || (::read(g_signal_pipe[0], &c, 1) < 0 && errno != EINTR)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no pipe: poll the flag
    }
  }
}

// The end of a process that is not our child (the server `up` started, then left to init).
// kill(pid, 0) cannot tell it: an exited process whose parent has not reaped it yet is a
// zombie, which kill() still finds. A pidfd turns readable when the process exits, zombie or
// not; it is opened before the process is signalled, so its pid cannot be reused under it.
class ProcessExit {
 public:
  explicit ProcessExit(pid_t pid) : pid_(pid) {
#ifdef SYS_pidfd_open
    fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  }
  ~ProcessExit() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProcessExit(const ProcessExit&) = delete;
  ProcessExit& operator=(const ProcessExit&) = delete;

  // True once the process has exited; waits for that `timeout` at most.
  bool Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!Exited()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      if (fd_ >= 0) {
        pollfd p{fd_, POLLIN, 0};
        (void)::poll(&p, 1, static_cast<int>(left.count()));
      } else {  // a kernel without pidfds (before 5.3)
        std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(20)));
      }
    }
    return true;
  }

 private:
  bool Exited() const {
    if (fd_ >= 0) {
      pollfd p{fd_, POLLIN, 0};
      return ::poll(&p, 1, 0) > 0;
    }
    if (::kill(pid_, 0) != 0) return errno == ESRCH;
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string stat;
    std::getline(in, stat);
    size_t close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
  }

  pid_t pid_;
  int fd_ = -1;
};

// Installs a built-in CRD unless the state directory has it already.
bool InstallCrd(local::ApiServer* api, std::string_view name, std::string_view yaml,
                std::ostream& err) {
  if (api->store().Get(StrCat("customresourcedefinitions.apiextensions.k8s.io//", name))) {
    return true;
  }
  if (absl::Status s = local::InstallCrd(api, yaml); !s.ok()) {
    err << "lockstep local: installing the CRD " << name << ": " << s.message() << "\n";
    return false;
  }
  return true;
}

int Serve(const Options& o, const std::string& self, std::ostream& out, std::ostream& err) {
  // The in-process controller's metrics, served at the API server's /metrics.
  common::MetricsRegistry metrics;
  common::AddProcessMetrics(&metrics);
  absl::StatusOr<std::unique_ptr<local::ApiServer>> api = local::ApiServer::Create(
      {.state_dir = o.state_dir, .audit_log = o.audit_log, .metrics = [&metrics] {
         return metrics.Render();
       }});
  if (!api.ok()) {
    err << "lockstep local: " << api.status().message() << "\n";
    return 1;
  }
  // The TrainingJob CRD is always there, so a job can be applied at once; with --tfjob, the
  // TFJob's too.
  if (!InstallCrd(api->get(), "trainingjobs.lockstep.io", local::TrainingJobCrdYaml(), err) ||
      (o.tfjob && !InstallCrd(api->get(), "tfjobs.kubeflow.org", local::TfJobCrdYaml(), err))) {
    return 1;
  }
  absl::StatusOr<std::unique_ptr<local::HttpServer>> http =
      local::HttpServer::Start(api->get(), "127.0.0.1", o.port);
  if (!http.ok()) {
    err << "lockstep local: " << http.status().message() << "\n";
    return 1;
  }
  std::stop_source stop;
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) g_signal_pipe[0] = g_signal_pipe[1] = -1;
  ::signal(SIGTERM, OnSignal);
  ::signal(SIGINT, OnSignal);
  // The kubelet: pods run as processes, talking to the API server in-process.
  std::unique_ptr<common::Clock> clock = common::NewRealClock();
  kube::RestClient client(std::make_shared<local::LocalTransport>(api->get()));
  std::string trainer =
      (fs::path(self).parent_path().parent_path() / "trainer" / "lockstep-trainer").string();
  if (::access(trainer.c_str(), X_OK) != 0) {
    trainer = (fs::path(self).parent_path() / "lockstep-trainer").string();
  }
  local::ApiServer* server = api->get();
  local::Runner runner(
      &client,
      {.state_dir = o.state_dir,
       .trainer_binary = trainer,
       .operator_binary = (fs::path(self).parent_path() / "lockstep-operator").string(),
       .api_server_url = (*http)->url(),
       .service_account_token =
           [server](const std::string& ns, const std::string& name) {
             return server->IssueServiceAccountToken(ns, name);
           }},
      clock.get());
  std::unique_ptr<local::PodSimulator> simulator;
  if (o.simulate) {
    simulator = std::make_unique<local::PodSimulator>(&client, o.simulation, clock.get());
  }
  std::jthread kubelet([&runner, &simulator, &stop, &o](std::stop_token) {
    if (!o.runner) return;
    if (simulator) {
      simulator->Run(stop.get_token());
    } else {
      runner.Run(stop.get_token());
    }
  });
  // Deployments (what a Helm chart installs) become pods.
  local::DeploymentController deployments(&client, clock.get());
  std::jthread deployment_thread([&deployments, &stop, &o](std::stop_token) {
    if (o.runner) deployments.Run(stop.get_token());
  });
  // The operator, in-process: the same controller lockstep-operator runs.
  kube::RestClient operator_client(
      std::make_shared<runtime::InstrumentedTransport>(
          std::make_shared<local::LocalTransport>(api->get()), &metrics),
      {.user_agent = "lockstep-operator (local)"});
  std::unique_ptr<trainingjob::ProgressSource> progress = trainingjob::NewHttpProgressSource();
  trainingjob::TrainingJobController controller(
      &operator_client, clock.get(), &metrics, progress.get(),
      // Loopback polls are cheap and local jobs short:
      // progress every 2 s rather than 10.
      {.workers = 2, .progress = {.interval = absl::Seconds(2)}});
  std::jthread operator_thread([&controller, &stop, &o](std::stop_token) {
    if (o.controller) controller.Run(stop.get_token());
  });
  std::optional<trainingjob::TrainingJobController> tfjobs;
  if (o.tfjob) {
    tfjobs.emplace(&operator_client, clock.get(), &metrics, progress.get(),
                   trainingjob::ControllerOptions{
                       .tfjobs = true, .workers = 2, .progress = {.interval = absl::Seconds(2)}});
  }
  std::jthread tfjob_thread([&tfjobs, &stop, &o](std::stop_token) {
    if (o.controller && tfjobs) tfjobs->Run(stop.get_token());
  });
  std::string info = o.state_dir + "/server.json";
  std::ofstream(info + ".tmp") << nlohmann::json{
      {"pid", ::getpid()},
      {"url", (*http)->url()}}.dump();
  fs::rename(info + ".tmp", info);
  WriteKubeconfig(o.state_dir, (*http)->url());
  common::LogInfo("local", "serving on ", (*http)->url(), ", state in ", o.state_dir);
  out << (*http)->url() << std::endl;
  WaitForSignal();
  stop.request_stop();
  common::LogInfo("local", "stopping");
  operator_thread.join();
  tfjob_thread.join();
  deployment_thread.join();
  kubelet.join();  // stops every pod's processes
  http->reset();
  std::error_code ec;
  fs::remove(info, ec);
  return 0;
}

int Up(const Options& o, const std::string& self, std::ostream& out, std::ostream& err) {
  if (std::optional<Running> r = FindServer(o.state_dir); r && Healthy(r->url)) {
    out << "lockstep local is already running at " << r->url << "\n"
        << "export KUBECONFIG=" << o.state_dir << "/kubeconfig\n";
    return 0;
  }
  std::error_code ec;
  fs::remove(o.state_dir + "/server.json", ec);
  pid_t pid = ::fork();
  if (pid < 0) {
    err << "lockstep local: fork failed\n";
    return 1;
  }
  if (pid == 0) {
    ::setsid();
    std::string log = o.state_dir + "/server.log";
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    if (f) std::freopen(log.c_str(), "a", stderr);
    std::freopen("/dev/null", "r", stdin);
    std::string port = std::to_string(o.port);
    std::vector<const char*> argv = {self.c_str(),        "local",  "serve",     "--state-dir",
                                     o.state_dir.c_str(), "--port", port.c_str()};
    if (!o.controller) argv.push_back("--no-controller");
    if (!o.runner) argv.push_back("--no-runner");
    if (o.tfjob) argv.push_back("--tfjob");
    const std::string start_delay = absl::FormatDuration(o.simulation.start_delay);
    const std::string run_time = absl::FormatDuration(o.simulation.run_time);
    if (o.simulate) {
      for (const char* a : {"--simulate-pods", "--simulate-start-delay", start_delay.c_str(),
                            "--simulate-run-time", run_time.c_str()}) {
        argv.push_back(a);
      }
    }
    if (!o.audit_log.empty()) {
      argv.push_back("--audit-log");
      argv.push_back(o.audit_log.c_str());
    }
    argv.push_back(nullptr);
    ::execv(self.c_str(), const_cast<char* const*>(argv.data()));
    std::_Exit(127);
  }
  // Wait for it to answer (it may be replaying a large state directory).
  for (int i = 0; i < 600; ++i) {
    if (std::optional<Running> r = FindServer(o.state_dir); r && Healthy(r->url)) {
      out << "lockstep local is running at " << r->url << " (pid " << r->pid << ")\n"
          << "point kubectl at it with:\n  export KUBECONFIG=" << o.state_dir << "/kubeconfig\n";
      return 0;
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) break;  // it died
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  err << "lockstep local: the server did not start; see " << o.state_dir << "/server.log\n";
  return 1;
}

int Down(const Options& o, std::ostream& out) {
  std::optional<Running> r = FindServer(o.state_dir);
  if (!r) {
    out << "lockstep local is not running\n";
    return 0;
  }
  ProcessExit exit(r->pid);
  ::kill(r->pid, SIGTERM);
  // It stops its pods first, each given up to 10 s to end after SIGTERM.
  if (!exit.Wait(std::chrono::seconds(30))) {
    ::kill(r->pid, SIGKILL);
    (void)exit.Wait(std::chrono::seconds(5));
  }
  ::waitpid(r->pid, nullptr, WNOHANG);  // reaped here when it is our own child (up, then down)
  std::error_code ec;
  fs::remove(o.state_dir + "/server.json", ec);
  out << "lockstep local stopped (state kept in " << o.state_dir << ")\n";
  return 0;
}

int Status(const Options& o, std::ostream& out) {
  std::optional<Running> r = FindServer(o.state_dir);
  if (!r || !Healthy(r->url)) {
    out << "lockstep local is not running (state directory " << o.state_dir << ")\n";
    return 3;
  }
  out << "lockstep local is running at " << r->url << " (pid " << r->pid << ")\n"
      << "export KUBECONFIG=" << o.state_dir << "/kubeconfig\n";
  return 0;
}

}  // namespace

int RunLocal(const std::vector<std::string>& args, const std::string& self, std::ostream& out,
             std::ostream& err) {
  Options o;
  o.state_dir = DefaultStateDir();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      out << kLocalUsage;
      return 0;
    }
    const std::string& a = args[i];
    if ((a == "--state-dir" || a == "--port" || a == "--audit-log" ||
         a == "--simulate-start-delay" || a == "--simulate-run-time") &&
        i + 1 < args.size()) {
      const std::string& v = args[++i];
      if (a == "--simulate-start-delay" || a == "--simulate-run-time") {
        absl::Duration d;
        if (!absl::ParseDuration(v, &d) || d < absl::ZeroDuration()) {
          err << "lockstep local: " << a << " " << v << ": want a duration such as 2s\n";
          return 2;
        }
        (a == "--simulate-start-delay" ? o.simulation.start_delay : o.simulation.run_time) = d;
      } else if (a == "--state-dir") {
        o.state_dir = v;
      } else if (a == "--audit-log") {
        o.audit_log = fs::absolute(v).string();
      } else {
        char* end = nullptr;
        long port = std::strtol(v.c_str(), &end, 10);
        if (*end != '\0' || port < 0 || port > 65535) {
          err << "lockstep local: --port " << v << ": want a number from 0 to 65535\n";
          return 2;
        }
        o.port = static_cast<uint16_t>(port);
      }
    } else if (a == "--no-runner") {
      o.runner = false;
    } else if (a == "--no-controller") {
      o.controller = false;
    } else if (a == "--simulate-pods") {
      o.simulate = true;
    } else if (a == "--tfjob") {
      o.tfjob = true;
    } else if (o.command.empty() && a[0] != '-') {
      o.command = a;
    } else {
      err << "lockstep local: unexpected argument \"" << a << "\"\n" << kLocalUsage;
      return 2;
    }
  }
  std::error_code ec;
  fs::create_directories(o.state_dir, ec);
  if (ec) {
    err << "lockstep local: state directory " << o.state_dir << ": " << ec.message() << "\n";
    return 1;
  }
  o.state_dir = fs::absolute(o.state_dir).string();
  if (o.command == "up") return Up(o, self, out, err);
  if (o.command == "down") return Down(o, out);
  if (o.command == "status") return Status(o, out);
  if (o.command == "serve") return Serve(o, self, out, err);
  err << (o.command.empty() ? "" : "lockstep local: unknown command \"" + o.command + "\"\n")
      << kLocalUsage;
  return 2;
}

}  // namespace lockstep::cli
