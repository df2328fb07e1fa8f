#include "operator/local/kubelet/resolve_container.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "absl/strings/escaping.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

constexpr char kTrainerImage[] = "lockstep/trainer";
constexpr char kOperatorImage[] = "lockstep/operator";

// A program: an absolute or relative path as given, else along PATH; "" if none.
std::string FindProgram(const std::string& name, const ContainerContext& ctx) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ctx.executable(name) ? name : "";
  std::stringstream dirs(ctx.path.empty() ? "/usr/local/bin:/usr/bin:/bin" : ctx.path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir + "/" + name;
    if (ctx.executable(candidate)) return candidate;
  }
  return "";
}

// An env var's valueFrom: a fieldRef of the pod, or a key of a Secret or ConfigMap.
std::optional<std::string> ResolveRef(const json& pod, const ContainerContext& ctx,
                                      const json& value_from, std::string* why) {
  if (const json* f = api::ObjectAt(value_from, "fieldRef")) {
    std::string path = api::StringAt(*f, "fieldPath");
    const json* meta = api::ObjectAt(pod, "metadata");
    if (path == "metadata.name") return ctx.name;
    if (path == "metadata.namespace") return ctx.ns;
    if (path == "metadata.uid") return ctx.uid;
    if (path == "status.podIP" || path == "status.hostIP") return ctx.pod_ip;
    if (path == "spec.nodeName") return ctx.node_name;
    if (path.rfind("metadata.labels['", 0) == 0 && path.ends_with("']") && meta) {
      std::string key = path.substr(17, path.size() - 19);
      const json* labels = api::ObjectAt(*meta, "labels");
      return labels ? api::StringAt(*labels, key.c_str()) : "";
    }
    *why = StrCat("fieldRef ", path, " is not supported");
    return std::nullopt;
  }
  for (const char* kind : {"secretKeyRef", "configMapKeyRef"}) {
    const json* ref = api::ObjectAt(value_from, kind);
    if (!ref) continue;
    bool secret = std::string(kind) == "secretKeyRef";
    absl::StatusOr<json> obj = ctx.get_object(secret, api::StringAt(*ref, "name"));
    std::string key = api::StringAt(*ref, "key");
    const json* data = obj.ok() ? api::ObjectAt(*obj, "data") : nullptr;
    std::string value = data ? api::StringAt(*data, key.c_str()) : "";
    if (!obj.ok() || !data || !data->contains(key)) {
      *why = StrCat(secret ? "secret" : "configmap", " \"", api::StringAt(*ref, "name"),
                    "\" key \"", key, "\" not found");
      return std::nullopt;
    }
    if (secret) {
      std::string decoded;
      if (!absl::Base64Unescape(value, &decoded)) {
        *why =
            StrCat("secret \"", api::StringAt(*ref, "name"), "\" key \"", key, "\" is not base64");
        return std::nullopt;
      }
      return decoded;
    }
    return value;
  }
  *why = "unsupported valueFrom";
  return std::nullopt;
}

// A CPU quantity (2, "2", "0.5", "500m") in CPUs; nullopt for anything else.
std::optional<double> CpuQuantity(const json& q) {
  if (q.is_number()) {
    const double v = q.get<double>();
    return v > 0 ? std::optional<double>(v) : std::nullopt;
  }
  if (!q.is_string()) return std::nullopt;
  std::string text = q.get<std::string>();
  double scale = 1;
  if (!text.empty() && text.back() == 'm') {
    scale = 1e-3;
    text.pop_back();
  }
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos ||
      std::count(text.begin(), text.end(), '.') > 1 || text == ".") {
    return std::nullopt;
  }
  const double v = std::stod(text) * scale;
  return v > 0 ? std::optional<double>(v) : std::nullopt;
}

// The CPUs a container may use here, where no cgroup enforces a limit: its limits.cpu, else
// an even share of this machine among the tasks of its TF_CONFIG cluster (they all run here),
// else nothing (every CPU).
std::optional<std::string> CpuShare(const json& cs, const std::map<std::string, std::string>& env,
                                    int cpus) {
  if (const json* res = api::ObjectAt(cs, "resources")) {
    if (const json* limits = api::ObjectAt(*res, "limits"); limits && limits->contains("cpu")) {
      if (std::optional<double> v = CpuQuantity((*limits)["cpu"])) {
        std::ostringstream out;
        out << *v;
        return out.str();
      }
    }
  }
  auto tf = env.find("TF_CONFIG");
  if (cpus <= 0 || tf == env.end()) return std::nullopt;
  const json config = json::parse(tf->second, nullptr, /*allow_exceptions=*/false);
  const json* cluster = config.is_object() ? api::ObjectAt(config, "cluster") : nullptr;
  if (cluster == nullptr) return std::nullopt;
  int tasks = 0;
  for (auto it = cluster->begin(); it != cluster->end(); ++it) {
    if (it->is_array()) tasks += static_cast<int>(it->size());
  }
  // A task outside the cluster (the evaluator) runs beside it.
  const json* task = api::ObjectAt(config, "task");
  const std::string type = task ? api::StringAt(*task, "type") : "";
  if (!type.empty() && !cluster->contains(type)) ++tasks;
  if (tasks <= 0) return std::nullopt;
  return std::to_string(std::max(1, cpus / tasks));
}

// The program and its arguments: the locally built binary for our images, else the
// container's command found on this machine.
std::variant<std::vector<std::string>, Waiting> ResolveArgv(const json& cs,
                                                            const ContainerContext& ctx) {
  std::string image = api::StringAt(cs, "image");
  std::vector<std::string> command = api::StringsAt(cs, "command");
  std::vector<std::string> argv;
  bool trainer = IsImage(image, kTrainerImage), op = IsImage(image, kOperatorImage);
  if ((trainer || op) && command.empty()) {
    std::string program = trainer ? ctx.trainer_binary : ctx.operator_binary;
    if (program.empty() || !ctx.executable(program)) {
      return Waiting{
          "ErrImagePull",
          StrCat("image ", image, " runs the local ", trainer ? "trainer" : "operator",
                 ", which is not built (", program.empty() ? "no binary given" : program, ")")};
    }
    argv.push_back(program);
  } else {
    std::string program = command.empty() ? "" : FindProgram(command[0], ctx);
    if (program.empty()) {
      return Waiting{
          "ErrImagePull",
          command.empty()
              ? StrCat("image ", image,
                       " cannot run here: lockstep local runs processes, and "
                       "the container has no command")
              : StrCat("image ", image, ": program \"", command[0], "\" is not on this machine")};
    }
    argv = command;
    argv[0] = program;
  }
  std::vector<std::string> args = api::StringsAt(cs, "args");
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// A configMap or secret volume: its keys (or the `items` chosen, at their paths) as files in
// the pod's volume directory, as the kubelet projects them. A missing object, or a missing
// item key, keeps the container waiting unless the volume is optional.
std::optional<Waiting> ProjectVolume(const json& vol, bool secret, const std::string& dir,
                                     const ContainerContext& ctx,
                                     std::vector<ProjectedFile>* files) {
  const json& src = secret ? vol["secret"] : vol["configMap"];
  const std::string name = api::StringAt(src, secret ? "secretName" : "name");
  const bool optional = src.is_object() && src.value("optional", false);
  const int mode = src.is_object() && src.contains("defaultMode") && src["defaultMode"].is_number()
                       ? src["defaultMode"].get<int>()
                       : 0644;
  const std::string what = StrCat(secret ? "secret" : "configmap", " \"", name, "\"");
  absl::StatusOr<json> obj = ctx.get_object(secret, name);
  if (!obj.ok()) {
    if (optional) return std::nullopt;
    return Waiting{"CreateContainerConfigError",
                   StrCat("volume \"", api::StringAt(vol, "name"), "\": ", what, " not found")};
  }
  // Every key, and whether its value is base64 (a Secret's data, a ConfigMap's binaryData).
  std::map<std::string, std::pair<std::string, bool>> keys;
  for (const char* field : {"data", "binaryData"}) {
    const json* d = api::ObjectAt(*obj, field);
    if (d == nullptr) continue;
    const bool base64 = secret || std::string(field) == "binaryData";
    for (auto it = d->begin(); it != d->end(); ++it) {
      keys[it.key()] = {it->is_string() ? it->get<std::string>() : "", base64};
    }
  }
  std::vector<std::pair<std::string, std::string>> chosen;  // key, path
  if (auto items = src.find("items"); items != src.end() && items->is_array()) {
    for (const json& item : *items) {
      const std::string key = api::StringAt(item, "key");
      if (keys.count(key) == 0) {
        if (optional) continue;
        return Waiting{"CreateContainerConfigError", StrCat(what, " has no key \"", key, "\"")};
      }
      chosen.emplace_back(key, api::StringAt(item, "path"));
    }
  } else {
    for (const auto& [k, v] : keys) chosen.emplace_back(k, k);
  }
  for (const auto& [key, path] : chosen) {
    if (path.empty() || path[0] == '/' || path.find("..") != std::string::npos) {
      return Waiting{"CreateContainerConfigError",
                     StrCat("volume \"", api::StringAt(vol, "name"), "\": item path \"", path,
                            "\" must be relative and stay inside the volume")};
    }
    auto [value, base64] = keys[key];
    if (base64) {
      std::string decoded;
      if (!absl::Base64Unescape(value, &decoded)) {
        return Waiting{"CreateContainerConfigError",
                       StrCat(what, " key \"", key, "\" is not base64")};
      }
      value = std::move(decoded);
    }
    files->push_back({StrCat(dir, "/", path), std::move(value), mode});
  }
  return std::nullopt;
}

// Volumes: a persistentVolumeClaim is a directory under the state directory shared by every
// pod that claims it (it outlives pods, as a PersistentVolume does), an emptyDir one per pod,
// a hostPath the host's path, a configMap or secret a per-pod directory of its keys.
std::optional<Waiting> ResolveMounts(const json& spec, const json& cs, const ContainerContext& ctx,
                                     std::vector<VolumeMount>* mounts,
                                     std::vector<ProjectedFile>* files) {
  auto vm = cs.find("volumeMounts");
  if (vm == cs.end() || !vm->is_array()) return std::nullopt;
  for (const json& m : *vm) {
    const std::string vname = api::StringAt(m, "name");
    const json* vol = nullptr;
    if (auto vs = spec.find("volumes"); vs != spec.end() && vs->is_array()) {
      for (const json& v : *vs) {
        if (api::StringAt(v, "name") == vname) vol = &v;
      }
    }
    std::string source;
    if (vol == nullptr) {
      return Waiting{"CreateContainerConfigError",
                     StrCat("volumeMount \"", vname, "\" names no volume of the pod")};
    } else if (vol->contains("persistentVolumeClaim")) {
      source = StrCat(ctx.state_dir, "/volumes/", ctx.ns, "/",
                      api::StringAt((*vol)["persistentVolumeClaim"], "claimName"));
    } else if (vol->contains("emptyDir")) {
      source = StrCat(ctx.pod_dir, "/volumes/", vname);
    } else if (vol->contains("hostPath")) {
      source = api::StringAt((*vol)["hostPath"], "path");
    } else if (vol->contains("configMap") || vol->contains("secret")) {
      source = StrCat(ctx.pod_dir, "/volumes/", vname);
      if (std::optional<Waiting> w =
              ProjectVolume(*vol, vol->contains("secret"), source, ctx, files)) {
        return w;
      }
    } else {
      return Waiting{"CreateContainerConfigError",
                     StrCat("volume \"", vname,
                            "\": lockstep local mounts persistentVolumeClaim, emptyDir, "
                            "hostPath, configMap and secret volumes only")};
    }
    mounts->push_back({source, api::StringAt(m, "mountPath")});
  }
  return std::nullopt;
}

}  // namespace

bool IsImage(const std::string& image, std::string_view repo) {
  std::string path = image.substr(0, image.find('@'));
  size_t colon = path.rfind(':');
  if (colon != std::string::npos && path.find('/', colon) == std::string::npos) {
    path.resize(colon);
  }
  return path == repo || (path.size() > repo.size() && path.ends_with(repo) &&
                          path[path.size() - repo.size() - 1] == '/');
}

std::string ExpandEnvRefs(const std::string& s, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '$' || i + 1 >= s.size()) {
      out += s[i];
    } else if (s[i + 1] == '$') {
      out += '$';
      ++i;
    } else if (s[i + 1] == '(') {
      size_t close = s.find(')', i + 2);
      auto it = close == std::string::npos ? env.end() : env.find(s.substr(i + 2, close - i - 2));
      if (it == env.end()) {
        out += s[i];
      } else {
        out += it->second;
        i = close;
      }
    } else {
      out += s[i];
    }
  }
  return out;
}

std::variant<LaunchSpec, Waiting> ResolveContainer(const json& pod, size_t index,
                                                   const ContainerContext& ctx) {
  const json& spec = pod.at("spec");
  const json& cs = spec.at("containers").at(index);
  LaunchSpec launch;
  std::variant<std::vector<std::string>, Waiting> argv = ResolveArgv(cs, ctx);
  if (auto* waiting = std::get_if<Waiting>(&argv)) return *waiting;
  launch.argv = std::move(std::get<std::vector<std::string>>(argv));

  std::map<std::string, std::string> env_values;
  launch.env = {
      StrCat("PATH=", ctx.path.empty() ? "/usr/bin:/bin" : ctx.path),
      StrCat("HOSTNAME=", spec.contains("hostname") ? api::StringAt(spec, "hostname") : ctx.name),
      StrCat("LOCKSTEP_TERMINATION_LOG=", ctx.termination_log)};
  if (auto e = cs.find("env"); e != cs.end() && e->is_array()) {
    for (const json& var : *e) {
      std::string name = api::StringAt(var, "name");
      if (name.empty()) continue;
      std::string value = api::StringAt(var, "value");
      if (const json* from = api::ObjectAt(var, "valueFrom")) {
        std::string why;
        std::optional<std::string> v = ResolveRef(pod, ctx, *from, &why);
        if (!v) return Waiting{"CreateContainerConfigError", StrCat("env ", name, ": ", why)};
        value = *v;
      }
      launch.env.push_back(name + "=" + value);
      env_values[name] = value;
    }
  }
  for (size_t a = 1; a < launch.argv.size(); ++a) {
    launch.argv[a] = ExpandEnvRefs(launch.argv[a], env_values);
  }
  // No cgroup bounds the process: say what a node would give it (cpu_limit.h reads it).
  if (!env_values.contains("LOCKSTEP_CPU_LIMIT")) {
    if (std::optional<std::string> share = CpuShare(cs, env_values, ctx.cpus)) {
      launch.env.push_back("LOCKSTEP_CPU_LIMIT=" + *share);
    }
  }
  // The service account: KUBECONFIG names the kubeconfig where it is mounted, or in the pod
  // directory when the child gets no mount namespace.
  if (ctx.service_account_files && spec.value("automountServiceAccountToken", true)) {
    std::string account = api::StringAt(spec, "serviceAccountName");
    if (account.empty()) account = "default";
    absl::StatusOr<std::string> dir = ctx.service_account_files(account);
    if (!dir.ok()) {
      return Waiting{"CreateContainerConfigError", std::string(dir.status().message())};
    }
    launch.service_account_dir = *dir;
    launch.kubeconfig_env = launch.env.size();
    launch.env.push_back(
        StrCat("KUBECONFIG=", ctx.private_mounts ? kServiceAccountDir : *dir, "/kubeconfig"));
    launch.kubeconfig_fallback = StrCat("KUBECONFIG=", *dir, "/kubeconfig");
  }
  if (std::optional<Waiting> w = ResolveMounts(spec, cs, ctx, &launch.mounts, &launch.files)) {
    return *w;
  }
  launch.working_dir = api::StringAt(cs, "workingDir");
  launch.log_path = PodLogPath(ctx.state_dir, ctx.ns, ctx.name, ctx.uid, api::StringAt(cs, "name"));
  launch.hosts_path = ctx.pod_dir + "/hosts";
  return launch;
}

std::string PodLogPath(const std::string& state_dir, const std::string& ns, const std::string& pod,
                       const std::string& uid, const std::string& container) {
  return StrCat(state_dir, "/pods/", ns, "_", pod, "_", uid, "/", container, ".log");
}

}  // namespace lockstep::local
