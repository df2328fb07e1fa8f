#include "operator/local/kubelet/pod_simulator.h"

#include <charconv>
#include <condition_variable>
#include <map>
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
#include "operator/runtime/informer.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

constexpr char kSimulatorLog[] = "simulator";

// The part of a pod the simulator reads.
struct SimPod {
  api::ObjectMeta metadata;
  std::string node_name;
  std::string restart_policy;
  bool gated = false;  // spec.schedulingGates: not bound until they are removed
  std::string phase;
  std::vector<std::pair<std::string, std::string>> containers;  // name, image
};

absl::StatusOr<SimPod> DecodeSimPod(const json& j) {
  const json* meta = api::ObjectAt(j, "metadata");
  if (!meta) return absl::InvalidArgumentError("no metadata");
  api::FieldErrors errors;
  SimPod p{api::DecodeObjectMeta(*meta, api::FieldPath("metadata"), &errors)};
  p.metadata.other = json::object();
  if (p.metadata.name.empty()) return absl::InvalidArgumentError("no metadata.name");
  if (const json* spec = api::ObjectAt(j, "spec")) {
    p.node_name = api::StringAt(*spec, "nodeName");
    p.restart_policy = api::StringAt(*spec, "restartPolicy");
    p.gated = spec->contains("schedulingGates") && (*spec)["schedulingGates"].is_array() &&
              !(*spec)["schedulingGates"].empty();
    if (auto cs = spec->find("containers"); cs != spec->end() && cs->is_array()) {
      for (const json& c : *cs) {
        if (c.is_object())
          p.containers.emplace_back(api::StringAt(c, "name"), api::StringAt(c, "image"));
      }
    }
  }
  if (const json* status = api::ObjectAt(j, "status")) p.phase = api::StringAt(*status, "phase");
  return p;
}

// What a pod's annotations ask of it.
struct Script {
  std::optional<absl::Duration> start_delay;
  std::optional<absl::Duration> exit_after;
  int exit_code = 0;
  std::string reason;
  std::string message;
};

absl::StatusOr<Script> ReadScript(const std::map<std::string, std::string>& annotations) {
  Script s;
  auto duration = [&](const char* key, std::optional<absl::Duration>* out) -> absl::Status {
    auto it = annotations.find(key);
    if (it == annotations.end()) return absl::OkStatus();
    absl::Duration d;
    if (!absl::ParseDuration(it->second, &d) || d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          StrCat("annotation ", key, ": \"", it->second, "\" is not a duration such as 30s"));
    }
    *out = d;
    return absl::OkStatus();
  };
  if (absl::Status st = duration(kSimulateStartDelay, &s.start_delay); !st.ok()) return st;
  if (absl::Status st = duration(kSimulateExitAfter, &s.exit_after); !st.ok()) return st;
  s.exit_code = s.exit_after ? 1 : 0;
  if (auto it = annotations.find(kSimulateExitCode); it != annotations.end()) {
    const std::string& v = it->second;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), s.exit_code);
    if (ec != std::errc() || end != v.data() + v.size() || s.exit_code < 0 || s.exit_code > 255) {
      return absl::InvalidArgumentError(StrCat("annotation ", kSimulateExitCode, ": \"", v,
                                               "\" is not an exit code from 0 to 255"));
    }
  }
  if (auto it = annotations.find(kSimulateReason); it != annotations.end()) s.reason = it->second;
  if (auto it = annotations.find(kSimulateMessage); it != annotations.end()) s.message = it->second;
  return s;
}

enum class Stage { kCreating, kRunning, kBackOff, kDone };

struct Sim {
  std::string ns, name, uid, ip;
  std::vector<std::pair<std::string, std::string>> containers;
  std::string restart_policy;
  Script script;
  std::string script_error;  // a bad annotation: the pod waits with this message
  Stage stage = Stage::kCreating;
  absl::Time due = absl::InfiniteFuture();  // monotonic: the next transition
  absl::Time started;                       // wall: the container's start
  absl::Time started_mono;
  int restarts = 0;
  absl::Duration backoff = absl::ZeroDuration();
  std::optional<json> terminated;  // the last termination
};

}  // namespace

struct PodSimulator::Impl {
  kube::RestClient* client;
  PodSimulatorOptions options;
  common::Clock* clock;
  runtime::Informer<SimPod> pods;
  std::mt19937_64 random;
  std::map<std::string, Sim> sims;                      // by namespace/name
  std::set<std::pair<absl::Time, std::string>> timers;  // (due, key)
  uint32_t next_ip = 1;

  std::mutex mu;  // guards dirty
  std::condition_variable_any cv;
  std::set<std::string> dirty;

  Impl(kube::RestClient* c, PodSimulatorOptions o, common::Clock* k)
      : client(c),
        options(std::move(o)),
        clock(k),
        pods(c, kube::resources::kPods, DecodeSimPod, {}, k),
        random(options.seed != 0 ? options.seed : std::random_device{}()) {
    auto mark = [this](const std::shared_ptr<const SimPod>& p) {
      {
        std::lock_guard lock(mu);
        dirty.insert(runtime::ObjectKey(p->metadata.namespace_, p->metadata.name));
      }
      cv.notify_all();
    };
    pods.AddHandlers({.on_add = mark,
                      .on_update = [mark](const auto&, const auto& p) { mark(p); },
                      .on_delete = mark});
  }

  absl::Duration Jittered(absl::Duration d) {
    if (options.jitter <= 0 || d <= absl::ZeroDuration()) return d;
    std::uniform_real_distribution<double> f(1 - options.jitter, 1 + options.jitter);
    return d * f(random);
  }

  void Schedule(const std::string& key, Sim& s, absl::Time due) {
    timers.erase({s.due, key});
    s.due = due;
    if (due != absl::InfiniteFuture()) timers.insert({due, key});
  }

  std::string AllocateIp() {
    uint32_t n = next_ip++;
    return StrCat("10.", (n >> 16) & 255, ".", (n >> 8) & 255, ".", n & 255);
  }

  // When a running container exits, from its script and the default run time.
  absl::Time ExitTime(const Sim& s) {
    if (s.script.exit_after) return s.started_mono + *s.script.exit_after;
    if (options.run_time > absl::ZeroDuration()) return s.started_mono + Jittered(options.run_time);
    return absl::InfiniteFuture();
  }

  json Status(const Sim& s) {
    json statuses = json::array();
    const bool running = s.stage == Stage::kRunning;
    for (const auto& [name, image] : s.containers) {
      json state;
      if (running) {
        state = {{"running", {{"startedAt", api::FormatKubeTime(s.started)}}}};
      } else if (s.stage == Stage::kDone && s.terminated) {
        state = {{"terminated", *s.terminated}};
      } else {
        std::string reason = s.stage == Stage::kBackOff ? "CrashLoopBackOff" : "ContainerCreating";
        std::string message = s.script_error;
        if (s.stage == Stage::kBackOff) {
          message =
              StrCat("back-off ", absl::FormatDuration(s.backoff), " restarting failed container");
        }
        if (!s.script_error.empty()) reason = "SimulationError";
        state = {{"waiting", {{"reason", reason}}}};
        if (!message.empty()) state["waiting"]["message"] = message;
      }
      json c = {
          {"name", name},   {"ready", running}, {"started", running}, {"restartCount", s.restarts},
          {"image", image}, {"imageID", ""},    {"state", state}};
      if (s.stage != Stage::kDone && s.terminated) c["lastState"] = {{"terminated", *s.terminated}};
      statuses.push_back(std::move(c));
    }
    // A container waiting to restart keeps the pod Running, as a kubelet's in CrashLoopBackOff.
    std::string phase = "Pending";
    if (running || s.stage == Stage::kBackOff) phase = "Running";
    if (s.stage == Stage::kDone) {
      phase = s.terminated && (*s.terminated)["exitCode"] != 0 ? "Failed" : "Succeeded";
    }
    const char* ready = running ? "True" : "False";
    json status = {{"phase", phase},
                   {"hostIP", "127.0.0.1"},
                   {"conditions",
                    {{{"type", "PodScheduled"}, {"status", "True"}},
                     {{"type", "Initialized"}, {"status", "True"}},
                     {{"type", "ContainersReady"}, {"status", ready}},
                     {{"type", "Ready"}, {"status", ready}}}},
                   {"containerStatuses", statuses}};
    if (!s.ip.empty()) {
      status["podIP"] = s.ip;
      status["podIPs"] = {{{"ip", s.ip}}};
    }
    return status;
  }

  void Report(Sim& s, bool first = false) {
    json status = Status(s);
    if (first) status["startTime"] = api::FormatKubeTime(clock->Now());
    absl::StatusOr<json> r = client->Patch(kube::resources::kPods, s.ns, s.name,
                                           kube::PatchType::kMerge, {{"status", status}}, "status");
    if (!r.ok() && !kube::IsApiNotFound(r.status())) {
      common::LogWarning(kSimulatorLog, "status of ", s.ns, "/", s.name, ": ",
                         r.status().message());
    }
  }

  void Forget(const std::string& key) {
    auto it = sims.find(key);
    if (it == sims.end()) return;
    timers.erase({it->second.due, key});
    sims.erase(it);
  }

  // A pod added, changed or deleted.
  void Sync(const std::string& key) {
    std::shared_ptr<const SimPod> p = pods.cache().Get(key);
    auto it = sims.find(key);
    if (!p || (it != sims.end() && it->second.uid != p->metadata.uid)) {
      Forget(key);  // gone, or replaced by a pod of the same name
      it = sims.end();
      if (!p) return;
    }
    const api::ObjectMeta& m = p->metadata;
    if (p->node_name.empty()) {
      if (!m.deletion_timestamp && !p->gated) BindPod(client, m, options.node_name);
      return;
    }
    if (p->node_name != options.node_name) return;
    if (m.deletion_timestamp) {
      (void)client->Delete(kube::resources::kPods, m.namespace_, m.name,
                           {.precondition_uid = m.uid, .grace_period_seconds = 0});
      Forget(key);
      return;
    }
    absl::StatusOr<Script> script = ReadScript(m.annotations);
    if (it == sims.end()) {
      if (p->phase == "Succeeded" || p->phase == "Failed") return;  // finished before us
      Sim s{.ns = m.namespace_, .name = m.name, .uid = m.uid};
      s.containers = p->containers;
      s.restart_policy = p->restart_policy;
      it = sims.emplace(key, std::move(s)).first;
      Sim& sim = it->second;
      if (script.ok()) {
        sim.script = *script;
        // An annotation's delay is exact; only the default is jittered.
        Schedule(key, sim,
                 clock->Monotonic() +
                     (script->start_delay ? *script->start_delay : Jittered(options.start_delay)));
      } else {
        sim.script_error = std::string(script.status().message());
      }
      Report(sim, /*first=*/true);
      return;
    }
    // A change to a pod we run: its annotations may have changed what it is to do.
    Sim& sim = it->second;
    if (!script.ok()) {
      common::LogWarning(kSimulatorLog, key, ": ", script.status().message(),
                         "; the schedule stands");
      return;
    }
    const bool changed =
        script->exit_after != sim.script.exit_after || script->exit_code != sim.script.exit_code ||
        script->reason != sim.script.reason || script->message != sim.script.message;
    sim.script = *script;
    if (changed && sim.stage == Stage::kRunning) Schedule(key, sim, ExitTime(sim));
  }

  // A timer came due.
  void Advance(const std::string& key, Sim& s) {
    absl::Time now = clock->Monotonic();
    if (s.stage == Stage::kCreating || s.stage == Stage::kBackOff) {
      s.stage = Stage::kRunning;
      if (s.ip.empty()) s.ip = AllocateIp();
      s.started = clock->Now();
      s.started_mono = now;
      Schedule(key, s, ExitTime(s));
      Report(s);
      return;
    }
    if (s.stage != Stage::kRunning) return;
    int code = s.script.exit_code;
    std::string reason =
        s.script.reason.empty() ? (code == 0 ? "Completed" : "Error") : s.script.reason;
    s.terminated = json{{"exitCode", code},
                        {"reason", reason},
                        {"startedAt", api::FormatKubeTime(s.started)},
                        {"finishedAt", api::FormatKubeTime(clock->Now())}};
    if (!s.script.message.empty()) (*s.terminated)["message"] = s.script.message;
    const bool restart =
        s.restart_policy == "Always" || (s.restart_policy == "OnFailure" && code != 0);
    if (!restart) {
      s.stage = Stage::kDone;
      Schedule(key, s, absl::InfiniteFuture());
    } else {
      s.stage = Stage::kBackOff;
      s.restarts += 1;
      s.backoff = s.backoff == absl::ZeroDuration()
                      ? options.crash_backoff_initial
                      : std::min(options.crash_backoff_max, s.backoff * 2);
      Schedule(key, s, now + s.backoff);
    }
    Report(s);
  }

  // Everything that is due now: changed pods, then timers.
  void Step() {
    std::set<std::string> changed;
    {
      std::lock_guard lock(mu);
      changed.swap(dirty);
    }
    for (const std::string& key : changed) Sync(key);
    absl::Time now = clock->Monotonic();
    while (!timers.empty() && timers.begin()->first <= now) {
      std::string key = timers.begin()->second;
      timers.erase(timers.begin());
      auto it = sims.find(key);
      if (it == sims.end()) continue;
      it->second.due = absl::InfiniteFuture();
      Advance(key, it->second);
    }
  }

  // Until a pod changes, the next timer is due, or `stop`; never more than 50 ms, so that a
  // clock that is not the wall's still moves the simulation.
  void Wait(std::stop_token stop) {
    absl::Duration d = absl::Milliseconds(50);
    if (!timers.empty()) d = std::min(d, timers.begin()->first - clock->Monotonic());
    if (d <= absl::ZeroDuration()) return;
    std::unique_lock lock(mu);
    cv.wait_for(lock, stop, absl::ToChronoNanoseconds(d), [&] { return !dirty.empty(); });
  }
};

PodSimulator::PodSimulator(kube::RestClient* client, PodSimulatorOptions options,
                           common::Clock* clock)
    : impl_(std::make_unique<Impl>(client, std::move(options), clock)) {}

PodSimulator::~PodSimulator() = default;

void PodSimulator::Run(std::stop_token stop) {
  std::jthread informer([this](std::stop_token s) { impl_->pods.Run(s); });
  std::stop_callback stop_informer(stop, [&] { informer.request_stop(); });
  if (!impl_->pods.WaitForSync(stop)) return;
  common::LogInfo(kSimulatorLog, "simulating pods on node ", impl_->options.node_name,
                  " (start after ", absl::FormatDuration(impl_->options.start_delay), ")");
  while (!stop.stop_requested()) {
    impl_->Step();
    impl_->Wait(stop);
  }
}

}  // namespace lockstep::local
