#include "operator/local/kubelet/runner.h"

#include <sched.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"
#include "operator/kube/api_error.h"
#include "operator/local/kubelet/binding.h"
#include "operator/local/kubelet/hosts_file.h"
#include "operator/local/kubelet/process_launcher.h"
#include "operator/local/kubelet/resolve_container.h"
#include "operator/runtime/informer.h"

namespace lockstep::local {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A configMap or secret volume's files, each replaced whole (written beside, then renamed).
absl::Status WriteProjectedFiles(const std::vector<ProjectedFile>& files) {
  for (const ProjectedFile& f : files) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(f.path).parent_path(), ec);
    const std::string tmp = f.path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << f.content;
      if (!out) return absl::InternalError("cannot write " + f.path);
    }
    std::filesystem::permissions(tmp, static_cast<std::filesystem::perms>(f.mode), ec);
    if (std::rename(tmp.c_str(), f.path.c_str()) != 0) {
      return absl::InternalError("cannot write " + f.path);
    }
  }
  return absl::OkStatus();
}

constexpr char kRunnerLog[] = "runner";

// A whole object, with the metadata the cache indexes.
struct Raw {
  api::ObjectMeta metadata;
  json object;
};

absl::StatusOr<Raw> DecodeRaw(const json& j) {
  api::FieldErrors errors;
  const json* meta = api::ObjectAt(j, "metadata");
  if (!meta) return absl::InvalidArgumentError("no metadata");
  Raw r{api::DecodeObjectMeta(*meta, api::FieldPath("metadata"), &errors), j};
  r.metadata.other = json::object();
  if (r.metadata.name.empty()) return absl::InvalidArgumentError("no metadata.name");
  return r;
}

struct Container {
  std::string name;
  pid_t pid = 0;  // also its process group
  int restarts = 0;
  bool done = false;  // exited and will not be restarted
  absl::Time started;
  absl::Time next_start;  // monotonic: not before (crash-loop backoff)
  absl::Duration backoff = absl::ZeroDuration();
  std::string waiting_reason = "ContainerCreating";
  std::string waiting_message;
  std::optional<json> terminated;  // the last termination, as containerStatuses wants it
  std::string termination_log;
};

struct PodRun {
  std::string ns, name, uid, ip, dir;
  std::string kubeconfig;  // with the service account's token, once issued
  json pod;
  std::vector<Container> containers;
  bool terminating = false;
  absl::Time kill_at;  // monotonic: SIGKILL after this
  int64_t grace = 0;   // the grace period kill_at was computed from
  std::string last_status;
};

}  // namespace

struct Runner::Impl {
  kube::RestClient* client;
  RunnerOptions options;
  common::Clock* clock;
  std::unique_ptr<ProcessLauncher> launcher;
  runtime::Informer<Raw> pods;
  runtime::Informer<Raw> services;
  std::map<std::string, PodRun> runs;  // by uid
  std::set<std::string> used_ips;
  // A random start, so a restarted runner does not hand out an address whose old sockets
  // may still linger in TIME_WAIT.
  uint32_t next_ip = 2 + static_cast<uint32_t>(std::random_device{}() % 60000);
  std::string hosts_text;
  std::mutex wake_mu;
  std::condition_variable_any wake_cv;
  bool woken = false;

  Impl(kube::RestClient* c, RunnerOptions o, common::Clock* k)
      : client(c),
        options(std::move(o)),
        clock(k),
        launcher(options.launcher ? options.launcher()
                                  : MakeLinuxProcessLauncher(options.private_hosts)),
        pods(c, kube::resources::kPods, DecodeRaw, {}, k),
        services(c, kube::resources::kServices, DecodeRaw, {}, k) {
    // A pod created, changed or deleted is acted on at once, not at the next tick (a lost
    // worker's replacement waits on this, and so does every training group it belongs to).
    pods.AddHandlers({.on_add = [this](const auto&) { Wake(); },
                      .on_update = [this](const auto&, const auto&) { Wake(); },
                      .on_delete = [this](const auto&) { Wake(); }});
  }

  void Wake() {
    std::lock_guard<std::mutex> lock(wake_mu);
    woken = true;
    wake_cv.notify_all();
  }
  // Until the next tick, an informer event, or `stop`.
  void Sleep(std::stop_token stop) {
    std::unique_lock<std::mutex> lock(wake_mu);
    wake_cv.wait_for(lock, stop, absl::ToChronoNanoseconds(options.tick), [&] { return woken; });
    woken = false;
  }

  std::string AllocateIp() {
    for (uint32_t tries = 0; tries < 65000; ++tries) {
      uint32_t n = next_ip++;
      if (next_ip > 65000) next_ip = 2;
      std::string ip = StrCat("127.0.", (n >> 8) & 255, ".", n & 255);
      if ((n & 255) == 0 || (n & 255) == 255 || used_ips.contains(ip)) continue;
      used_ips.insert(ip);
      return ip;
    }
    return "127.0.0.1";
  }

  // Every name a pod may look up, with the address it resolves to.
  std::string Hosts() {
    std::vector<HostsPod> hosts_pods;
    for (const auto& [uid, run] : runs) hosts_pods.push_back({run.ns, run.name, run.ip, &run.pod});
    std::vector<std::shared_ptr<const Raw>> listed = services.cache().List();
    std::vector<HostsService> hosts_services;
    for (const auto& svc : listed) {
      hosts_services.push_back({svc->metadata.namespace_, svc->metadata.name, &svc->object});
    }
    return HostsFile(hosts_pods, hosts_services);
  }

  void WriteHosts() {
    std::string text = Hosts();
    if (text == hosts_text) return;
    hosts_text = text;
    for (auto& [uid, run] : runs) {
      // In place (not by rename): the bind mount follows the inode.
      int fd = ::open((run.dir + "/hosts").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) continue;
      [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());
      ::close(fd);
    }
  }

  // The service account's token, namespace and kubeconfig, written once per pod into
  // <pod dir>/serviceaccount; the launcher bind-mounts them where Kubernetes puts them.
  absl::StatusOr<std::string> ServiceAccountFiles(PodRun& run, const std::string& account) {
    std::string sa_dir = run.dir + "/serviceaccount";
    if (!run.kubeconfig.empty()) return sa_dir;
    absl::StatusOr<std::string> token = options.service_account_token(run.ns, account);
    if (!token.ok()) {
      return absl::Status(token.status().code(),
                          StrCat("service account token: ", token.status().message()));
    }
    std::string kubeconfig = StrCat(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: ",
        options.api_server_url, "\nusers:\n- name: ", account, "\n  user:\n    token: ", *token,
        "\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: ", account,
        "\n    namespace: ", run.ns, "\ncurrent-context: local\n");
    std::error_code ec;
    fs::create_directories(sa_dir, ec);
    bool written = !ec;
    for (const auto& [file, text] : {std::pair<const char*, const std::string&>{"token", *token},
                                     {"namespace", run.ns},
                                     {"kubeconfig", kubeconfig}}) {
      std::string path = sa_dir + "/" + file;
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      written = written && fd >= 0 &&
                ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      if (fd >= 0) ::close(fd);
    }
    if (!written) {
      return absl::InternalError(StrCat("cannot write the service account files in ", sa_dir));
    }
    run.kubeconfig = sa_dir + "/kubeconfig";
    return sa_dir;
  }

  ContainerContext ContextOf(PodRun& run, const Container& c) {
    ContainerContext ctx;
    ctx.ns = run.ns;
    ctx.name = run.name;
    ctx.uid = run.uid;
    ctx.pod_ip = run.ip;
    ctx.pod_dir = run.dir;
    ctx.state_dir = options.state_dir;
    ctx.node_name = options.node_name;
    ctx.trainer_binary = options.trainer_binary;
    ctx.operator_binary = options.operator_binary;
    ctx.path = std::getenv("PATH") ? std::getenv("PATH") : "";
    ctx.termination_log = c.termination_log;
    ctx.private_mounts = options.private_hosts;
    cpu_set_t set;
    CPU_ZERO(&set);
    ctx.cpus = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    ctx.executable = [](const std::string& path) { return ::access(path.c_str(), X_OK) == 0; };
    ctx.get_object = [this, ns = run.ns](bool secret, const std::string& name) {
      return client->Get(secret ? kube::resources::kSecrets
                                : kube::Resource{"", "v1", "configmaps", "ConfigMap", true},
                         ns, name);
    };
    if (!options.api_server_url.empty() && options.service_account_token) {
      ctx.service_account_files = [this, &run](const std::string& account) {
        return ServiceAccountFiles(run, account);
      };
    }
    return ctx;
  }

  // Starts container `i` of `run`; on a problem sets a waiting reason instead.
  void Start(PodRun& run, size_t i) {
    Container& c = run.containers[i];
    std::variant<LaunchSpec, Waiting> resolved = ResolveContainer(run.pod, i, ContextOf(run, c));
    if (auto* waiting = std::get_if<Waiting>(&resolved)) {
      c.waiting_reason = waiting->reason;
      c.waiting_message = waiting->message;
      return;
    }
    const LaunchSpec& spec = std::get<LaunchSpec>(resolved);
    if (absl::Status s = WriteProjectedFiles(spec.files); !s.ok()) {
      c.waiting_reason = "CreateContainerConfigError";
      c.waiting_message = std::string(s.message());
      return;
    }
    std::ofstream(c.termination_log, std::ios::trunc).close();
    absl::StatusOr<int> pid = launcher->Start(spec);
    if (!pid.ok()) {
      c.waiting_reason = "RunContainerError";
      c.waiting_message = std::string(pid.status().message());
      return;
    }
    c.pid = *pid;
    c.started = clock->Now();
    c.waiting_reason.clear();
    c.waiting_message.clear();
    common::LogInfo(kRunnerLog, "started ", run.ns, "/", run.name, "/", c.name, " as pid ", *pid,
                    " (", spec.argv[0], ")");
  }

  void Reap(PodRun& run) {
    std::string policy = api::StringAt(run.pod["spec"], "restartPolicy");
    for (Container& c : run.containers) {
      if (c.pid == 0) continue;
      std::optional<int> exited = launcher->Poll(c.pid);
      if (!exited) continue;
      launcher->Signal(c.pid, SIGKILL);  // whatever it left behind in its group
      int code = *exited;
      std::ifstream in(c.termination_log);
      std::stringstream message;
      message << in.rdbuf();
      std::string reason = code == 0 ? "Completed" : (code == 137 ? "Killed" : "Error");
      c.terminated = json{{"exitCode", code},
                          {"reason", reason},
                          {"startedAt", api::FormatKubeTime(c.started)},
                          {"finishedAt", api::FormatKubeTime(clock->Now())}};
      if (!message.str().empty()) (*c.terminated)["message"] = message.str().substr(0, 4096);
      c.pid = 0;
      common::LogInfo(kRunnerLog, run.ns, "/", run.name, "/", c.name, " exited with ", code);
      bool restart =
          !run.terminating && (policy == "Always" || (policy == "OnFailure" && code != 0));
      if (!restart) {
        c.done = true;
        continue;
      }
      c.restarts += 1;
      c.backoff = c.backoff == absl::ZeroDuration()
                      ? options.crash_backoff_initial
                      : std::min(options.crash_backoff_max, c.backoff * 2);
      c.next_start = clock->Monotonic() + c.backoff;
      c.waiting_reason = "CrashLoopBackOff";
      c.waiting_message =
          StrCat("back-off ", absl::FormatDuration(c.backoff), " restarting failed container");
    }
  }

  json Status(const PodRun& run) {
    json statuses = json::array();
    bool any_running = false, all_done = true, any_failed = false;
    for (const Container& c : run.containers) {
      json state;
      if (c.pid) {
        state = {{"running", {{"startedAt", api::FormatKubeTime(c.started)}}}};
        any_running = true;
      } else if (c.done && c.terminated) {
        state = {{"terminated", *c.terminated}};
        if ((*c.terminated)["exitCode"] != 0) any_failed = true;
      } else {
        state = {{"waiting", {{"reason", c.waiting_reason}}}};
        if (!c.waiting_message.empty()) state["waiting"]["message"] = c.waiting_message;
      }
      if (!c.done) all_done = false;
      json s = {{"name", c.name},
                {"ready", c.pid != 0},
                {"started", c.pid != 0},
                {"restartCount", c.restarts},
                {"image",
                 api::StringAt(run.pod["spec"]["containers"][&c - run.containers.data()], "image")},
                // Required by clients (the Python client refuses a status without it); a local
                // program has no image digest, so it is empty, as a kubelet's before a pull.
                {"imageID", ""},
                {"state", state}};
      if (!c.done && c.terminated) s["lastState"] = {{"terminated", *c.terminated}};
      statuses.push_back(s);
    }
    std::string phase =
        all_done ? (any_failed ? "Failed" : "Succeeded") : (any_running ? "Running" : "Pending");
    bool ready = any_running && std::all_of(run.containers.begin(), run.containers.end(),
                                            [](const Container& c) { return c.pid != 0; });
    std::string now = api::FormatKubeTime(clock->Now());
    json conditions = json::array({
        {{"type", "PodScheduled"}, {"status", "True"}},
        {{"type", "Initialized"}, {"status", "True"}},
        {{"type", "ContainersReady"}, {"status", ready ? "True" : "False"}},
        {{"type", "Ready"}, {"status", ready ? "True" : "False"}},
    });
    return {{"phase", phase},        {"podIP", run.ip},          {"podIPs", {{{"ip", run.ip}}}},
            {"hostIP", "127.0.0.1"}, {"conditions", conditions}, {"containerStatuses", statuses}};
  }

  void Report(PodRun& run) {
    json status = Status(run);
    std::string text = status.dump();
    if (text == run.last_status) return;
    if (run.pod.contains("status") && !run.last_status.empty()) {
      // keep startTime stable
    }
    if (!run.pod.contains("status") || !run.pod["status"].contains("startTime")) {
      status["startTime"] = api::FormatKubeTime(clock->Now());
    } else {
      status["startTime"] = run.pod["status"]["startTime"];
    }
    absl::StatusOr<json> r = client->Patch(kube::resources::kPods, run.ns, run.name,
                                           kube::PatchType::kMerge, {{"status", status}}, "status");
    if (r.ok()) {
      run.last_status = text;
      run.pod = *r;
    } else if (!kube::IsApiNotFound(r.status())) {
      common::LogWarning(kRunnerLog, "status of ", run.ns, "/", run.name, ": ",
                         r.status().message());
    }
  }

  void Kill(PodRun& run, int sig) {
    for (Container& c : run.containers) {
      if (c.pid) launcher->Signal(c.pid, sig);
    }
  }

  void Forget(const std::string& uid) {
    auto it = runs.find(uid);
    if (it == runs.end()) return;
    Kill(it->second, SIGKILL);
    for (Container& c : it->second.containers) {
      if (c.pid) launcher->Wait(c.pid);
    }
    used_ips.erase(it->second.ip);
    runs.erase(it);
  }

  void Tick() {
    std::set<std::string> seen;
    for (const auto& p : pods.cache().List()) {
      const json& pod = p->object;
      const json* spec = api::ObjectAt(pod, "spec");
      if (!spec) continue;
      std::string node = api::StringAt(*spec, "nodeName");
      const std::string& uid = p->metadata.uid;
      if (node.empty()) {
        // A gated pod waits for its gates to be removed (Kueue's admission, for one).
        const bool gated = spec->contains("schedulingGates") &&
                           (*spec)["schedulingGates"].is_array() &&
                           !(*spec)["schedulingGates"].empty();
        if (!p->metadata.deletion_timestamp && !gated) {
          BindPod(client, p->metadata, options.node_name);
        }
        continue;
      }
      if (node != options.node_name) continue;
      seen.insert(uid);
      auto it = runs.find(uid);
      if (it == runs.end()) {
        std::string phase =
            api::ObjectAt(pod, "status") ? api::StringAt(pod["status"], "phase") : "";
        if (phase == "Succeeded" || phase == "Failed")
          continue;  // finished before a restart of ours
        PodRun run;
        run.ns = p->metadata.namespace_;
        run.name = p->metadata.name;
        run.uid = uid;
        run.ip = AllocateIp();
        run.dir = StrCat(options.state_dir, "/pods/", run.ns, "_", run.name, "_", uid);
        fs::create_directories(run.dir);
        auto cs = spec->find("containers");
        if (cs != spec->end() && cs->is_array()) {
          for (const json& c : *cs) {
            Container container;
            container.name = api::StringAt(c, "name");
            container.termination_log = run.dir + "/" + container.name + ".termination-log";
            run.containers.push_back(std::move(container));
          }
        }
        it = runs.emplace(uid, std::move(run)).first;
        hosts_text.clear();  // a new file to fill
      }
      PodRun& run = it->second;
      run.pod = pod;
      if (p->metadata.deletion_timestamp) {
        // A second delete may shorten the grace period: the kill comes sooner, never later.
        int64_t grace = p->metadata.deletion_grace_period_seconds.value_or(30);
        absl::Time kill_at = clock->Monotonic() + absl::Seconds(grace);
        if (!run.terminating) {
          run.terminating = true;
          run.grace = grace;
          run.kill_at = kill_at;
          Kill(run, SIGTERM);
        } else if (grace < run.grace) {
          run.grace = grace;
          run.kill_at = std::min(run.kill_at, kill_at);
        }
      }
    }
    for (auto it = runs.begin(); it != runs.end();) {
      std::string uid = (it++)->first;
      if (!seen.contains(uid)) Forget(uid);  // removed from the API: stop at once
    }
    WriteHosts();
    for (auto it = runs.begin(); it != runs.end();) {
      PodRun& run = it->second;
      Reap(run);
      if (run.terminating) {
        bool alive = std::any_of(run.containers.begin(), run.containers.end(),
                                 [](const Container& c) { return c.pid != 0; });
        if (alive && clock->Monotonic() >= run.kill_at) Kill(run, SIGKILL);
        if (!alive) {
          (void)client->Delete(kube::resources::kPods, run.ns, run.name,
                               {.precondition_uid = run.uid, .grace_period_seconds = 0});
          used_ips.erase(run.ip);
          it = runs.erase(it);
          continue;
        }
      } else {
        for (size_t i = 0; i < run.containers.size(); ++i) {
          Container& c = run.containers[i];
          if (c.pid == 0 && !c.done && clock->Monotonic() >= c.next_start) Start(run, i);
        }
      }
      Report(run);
      ++it;
    }
  }

  void StopAll() {
    for (auto& [uid, run] : runs) Kill(run, SIGTERM);
    absl::Time deadline = clock->Monotonic() + absl::Seconds(10);
    for (auto& [uid, run] : runs) {
      for (Container& c : run.containers) {
        bool exited = false;
        while (c.pid && !(exited = launcher->Poll(c.pid).has_value()) &&
               clock->Monotonic() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (c.pid) {
          launcher->Signal(c.pid, SIGKILL);
          if (!exited) launcher->Wait(c.pid);
          c.pid = 0;
        }
      }
    }
    runs.clear();
  }
};

Runner::Runner(kube::RestClient* client, RunnerOptions options, common::Clock* clock)
    : impl_(std::make_unique<Impl>(client, std::move(options), clock)) {}

Runner::~Runner() { impl_->StopAll(); }

void Runner::Run(std::stop_token stop) {
  std::jthread pods([this](std::stop_token s) { impl_->pods.Run(s); });
  std::jthread services([this](std::stop_token s) { impl_->services.Run(s); });
  // The informers end together, as soon as `stop` comes, rather than one after the other
  // when these threads are destroyed (each ends its watch by cancelling it: no wait).
  std::stop_callback stop_informers(stop, [&] {
    pods.request_stop();
    services.request_stop();
  });
  if (!impl_->pods.WaitForSync(stop) || !impl_->services.WaitForSync(stop)) return;
  while (!stop.stop_requested()) {
    impl_->Tick();
    impl_->Sleep(stop);
  }
  impl_->StopAll();
}

}  // namespace lockstep::local
