#include "operator/local/runner.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "common/log.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"
#include "operator/kube/api_error.h"
#include "operator/kube/label_selector.h"
#include "operator/runtime/informer.h"

namespace lockstep::local {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr char kLog[] = "runner";
constexpr char kTrainerImage[] = "lockstep/trainer";
constexpr char kOperatorImage[] = "lockstep/operator";
constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// Whether `image` ("[registry/]path[:tag][@digest]") is repository `repo`, from any registry.
bool IsImage(const std::string& image, std::string_view repo) {
  std::string path = image.substr(0, image.find('@'));
  size_t colon = path.rfind(':');
  if (colon != std::string::npos && path.find('/', colon) == std::string::npos) {
    path.resize(colon);
  }
  return path == repo || (path.size() > repo.size() && path.ends_with(repo) &&
                          path[path.size() - repo.size() - 1] == '/');
}

// $(NAME) in a command or argument becomes the value of env var NAME when the container
// defines it; $$ is a literal $; other references stay as written (the kubelet's rules).
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

std::string Str(const json& j, const char* key) { return api::StringAt(j, key); }

// Finds a program: an absolute or relative path as given, else along PATH.
std::string FindProgram(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
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
  std::string last_status;
};

// open/write/close only: safe between fork and exec.
bool WriteProcFile(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = std::strlen(text);
  bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

int SignalExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

struct Runner::Impl {
  kube::RestClient* client;
  RunnerOptions options;
  kube::Clock* clock;
  runtime::Informer<Raw> pods;
  runtime::Informer<Raw> services;
  std::map<std::string, PodRun> runs;  // by uid
  std::set<std::string> used_ips;
  // A random start, so a restarted runner does not hand out an address whose old sockets
  // may still linger in TIME_WAIT.
  uint32_t next_ip = 2 + static_cast<uint32_t>(std::random_device{}() % 60000);
  std::string hosts_text;

  Impl(kube::RestClient* c, RunnerOptions o, kube::Clock* k)
      : client(c),
        options(std::move(o)),
        clock(k),
        pods(c, kube::resources::kPods, DecodeRaw, {}, k),
        services(c, kube::resources::kServices, DecodeRaw, {}, k) {}

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
  std::string HostsFile() {
    std::map<std::string, std::set<std::string>> names;  // ip -> names
    std::map<std::string, const PodRun*> by_key;
    for (const auto& [uid, run] : runs) by_key[run.ns + "/" + run.name] = &run;
    for (const auto& [uid, run] : runs) {
      const json* spec = api::ObjectAt(run.pod, "spec");
      std::string hostname = spec ? Str(*spec, "hostname") : "";
      if (hostname.empty()) hostname = run.name;
      names[run.ip].insert(hostname);
      std::string sub = spec ? Str(*spec, "subdomain") : "";
      if (!sub.empty()) {
        for (const char* suffix : {"", ".svc", ".svc.cluster.local"}) {
          names[run.ip].insert(StrCat(hostname, ".", sub, ".", run.ns, suffix));
        }
      }
    }
    for (const auto& svc : services.cache().List()) {
      const json* spec = api::ObjectAt(svc->object, "spec");
      const json* selector = spec ? api::ObjectAt(*spec, "selector") : nullptr;
      if (!selector || selector->empty()) continue;
      std::map<std::string, std::string> sel;
      for (auto it = selector->begin(); it != selector->end(); ++it) {
        if (it->is_string()) sel[it.key()] = it->get<std::string>();
      }
      kube::LabelSelector match = kube::LabelSelector::FromMap(sel);
      for (const auto& [uid, run] : runs) {
        if (run.ns != svc->metadata.namespace_) continue;
        std::map<std::string, std::string> labels;
        if (const json* m = api::ObjectAt(run.pod, "metadata")) {
          if (const json* l = api::ObjectAt(*m, "labels")) {
            for (auto it = l->begin(); it != l->end(); ++it) {
              if (it->is_string()) labels[it.key()] = it->get<std::string>();
            }
          }
        }
        if (!match.Matches(labels)) continue;
        const std::string& n = svc->metadata.name;
        for (const char* suffix : {".svc", ".svc.cluster.local"}) {
          names[run.ip].insert(StrCat(n, ".", run.ns, suffix));
        }
        names[run.ip].insert(StrCat(n, ".", run.ns));
        names[run.ip].insert(n);
      }
    }
    std::string text = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
    for (const auto& [ip, list] : names) {
      text += ip;
      for (const std::string& n : list) text += "\t" + n;
      text += "\n";
    }
    return text;
  }

  void WriteHosts() {
    std::string text = HostsFile();
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

  std::optional<std::string> ResolveRef(const PodRun& run, const json& value_from,
                                        std::string* why) {
    if (const json* f = api::ObjectAt(value_from, "fieldRef")) {
      std::string path = Str(*f, "fieldPath");
      const json* meta = api::ObjectAt(run.pod, "metadata");
      if (path == "metadata.name") return run.name;
      if (path == "metadata.namespace") return run.ns;
      if (path == "metadata.uid") return run.uid;
      if (path == "status.podIP" || path == "status.hostIP") return run.ip;
      if (path == "spec.nodeName") return options.node_name;
      if (path.rfind("metadata.labels['", 0) == 0 && path.ends_with("']") && meta) {
        std::string key = path.substr(17, path.size() - 19);
        const json* labels = api::ObjectAt(*meta, "labels");
        return labels ? Str(*labels, key.c_str()) : "";
      }
      *why = StrCat("fieldRef ", path, " is not supported");
      return std::nullopt;
    }
    for (const char* kind : {"secretKeyRef", "configMapKeyRef"}) {
      const json* ref = api::ObjectAt(value_from, kind);
      if (!ref) continue;
      bool secret = std::string(kind) == "secretKeyRef";
      absl::StatusOr<json> obj =
          client->Get(secret ? kube::resources::kSecrets
                             : kube::Resource{"", "v1", "configmaps", "ConfigMap", true},
                      run.ns, Str(*ref, "name"));
      std::string key = Str(*ref, "key");
      const json* data = obj.ok() ? api::ObjectAt(*obj, secret ? "data" : "data") : nullptr;
      std::string value = data ? Str(*data, key.c_str()) : "";
      if (!obj.ok() || !data || !data->contains(key)) {
        *why = StrCat(secret ? "secret" : "configmap", " \"", Str(*ref, "name"), "\" key \"", key,
                      "\" not found");
        return std::nullopt;
      }
      if (secret) {
        std::string decoded;
        if (!absl::Base64Unescape(value, &decoded)) {
          *why = StrCat("secret \"", Str(*ref, "name"), "\" key \"", key, "\" is not base64");
          return std::nullopt;
        }
        return decoded;
      }
      return value;
    }
    *why = "unsupported valueFrom";
    return std::nullopt;
  }

  // Starts container `i` of `run`; on a problem sets a waiting reason instead.
  void Start(PodRun& run, size_t i) {
    Container& c = run.containers[i];
    const json& spec = run.pod["spec"];
    const json& cs = spec["containers"][i];
    std::string image = Str(cs, "image");
    std::vector<std::string> argv;
    std::string program;
    std::vector<std::string> command = api::StringsAt(cs, "command");
    std::vector<std::string> args = api::StringsAt(cs, "args");
    bool trainer = IsImage(image, kTrainerImage), op = IsImage(image, kOperatorImage);
    if ((trainer || op) && command.empty()) {
      program = trainer ? options.trainer_binary : options.operator_binary;
      if (program.empty() || ::access(program.c_str(), X_OK) != 0) {
        c.waiting_reason = "ErrImagePull";
        c.waiting_message =
            StrCat("image ", image, " runs the local ", trainer ? "trainer" : "operator",
                   ", which is not built (", program.empty() ? "no binary given" : program, ")");
        return;
      }
      argv.push_back(program);
    } else {
      program = command.empty() ? "" : FindProgram(command[0]);
      if (program.empty()) {
        c.waiting_reason = "ErrImagePull";
        c.waiting_message =
            command.empty()
                ? StrCat("image ", image,
                         " cannot run here: lockstep local runs processes, and "
                         "the container has no command")
                : StrCat("image ", image, ": program \"", command[0], "\" is not on this machine");
        return;
      }
      argv = command;
      argv[0] = program;
    }
    argv.insert(argv.end(), args.begin(), args.end());

    std::map<std::string, std::string> env_values;
    std::vector<std::string> env = {
        StrCat("PATH=", std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin"),
        StrCat("HOSTNAME=", spec.contains("hostname") ? Str(spec, "hostname") : run.name),
        StrCat("LOCKSTEP_TERMINATION_LOG=", c.termination_log)};
    if (auto e = cs.find("env"); e != cs.end() && e->is_array()) {
      for (const json& var : *e) {
        std::string name = Str(var, "name");
        if (name.empty()) continue;
        std::string value = Str(var, "value");
        if (const json* from = api::ObjectAt(var, "valueFrom")) {
          std::string why;
          std::optional<std::string> v = ResolveRef(run, *from, &why);
          if (!v) {
            c.waiting_reason = "CreateContainerConfigError";
            c.waiting_message = StrCat("env ", name, ": ", why);
            return;
          }
          value = *v;
        }
        env.push_back(name + "=" + value);
        env_values[name] = value;
      }
    }
    for (size_t a = 1; a < argv.size(); ++a) argv[a] = ExpandEnvRefs(argv[a], env_values);
    // The service account: token, namespace and a kubeconfig in <pod dir>/serviceaccount,
    // bind-mounted where Kubernetes puts the token (after the pod's volumes, so a volume
    // at /var or /tmp cannot hide it); KUBECONFIG names the kubeconfig there, or in the pod
    // directory when the child gets no mount namespace.
    std::string sa_dir;
    std::optional<size_t> kubeconfig_env;
    if (!options.api_server_url.empty() && options.service_account_token &&
        spec.value("automountServiceAccountToken", true)) {
      sa_dir = run.dir + "/serviceaccount";
      if (run.kubeconfig.empty()) {
        std::string account = Str(spec, "serviceAccountName");
        if (account.empty()) account = "default";
        absl::StatusOr<std::string> token = options.service_account_token(run.ns, account);
        if (!token.ok()) {
          c.waiting_reason = "CreateContainerConfigError";
          c.waiting_message = StrCat("service account token: ", token.status().message());
          return;
        }
        std::string kubeconfig = StrCat(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: ",
            options.api_server_url, "\nusers:\n- name: ", account, "\n  user:\n    token: ", *token,
            "\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: ", account,
            "\n    namespace: ", run.ns, "\ncurrent-context: local\n");
        std::error_code ec;
        fs::create_directories(sa_dir, ec);
        bool written = !ec;
        for (const auto& [file, text] :
             {std::pair<const char*, const std::string&>{"token", *token},
              {"namespace", run.ns},
              {"kubeconfig", kubeconfig}}) {
          std::string path = sa_dir + "/" + file;
          int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
          written = written && fd >= 0 &&
                    ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
          if (fd >= 0) ::close(fd);
        }
        if (!written) {
          c.waiting_reason = "CreateContainerConfigError";
          c.waiting_message = StrCat("cannot write the service account files in ", sa_dir);
          return;
        }
        run.kubeconfig = sa_dir + "/kubeconfig";
      }
      kubeconfig_env = env.size();
      env.push_back(StrCat("KUBECONFIG=", options.private_hosts ? kServiceAccountDir : sa_dir,
                           "/kubeconfig"));
    }
    // Volumes: a persistentVolumeClaim is a directory under the state directory shared by
    // every pod that claims it (it outlives pods, as a PersistentVolume does), an emptyDir one
    // per pod, a hostPath the host's path; each is bind-mounted at its mountPath in the pod's
    // own mount namespace.
    struct Mount {
      std::string source, target;
      std::vector<std::string> target_parents;  // mkdir'ed in the child, outermost first
    };
    std::vector<Mount> mounts;
    if (auto vm = cs.find("volumeMounts"); vm != cs.end() && vm->is_array()) {
      for (const json& m : *vm) {
        const std::string vname = Str(m, "name");
        const json* vol = nullptr;
        if (auto vs = spec.find("volumes"); vs != spec.end() && vs->is_array()) {
          for (const json& v : *vs) {
            if (Str(v, "name") == vname) vol = &v;
          }
        }
        std::string source;
        if (vol == nullptr) {
          c.waiting_reason = "CreateContainerConfigError";
          c.waiting_message = StrCat("volumeMount \"", vname, "\" names no volume of the pod");
          return;
        } else if (vol->contains("persistentVolumeClaim")) {
          source = StrCat(options.state_dir, "/volumes/", run.ns, "/",
                          Str((*vol)["persistentVolumeClaim"], "claimName"));
        } else if (vol->contains("emptyDir")) {
          source = StrCat(run.dir, "/volumes/", vname);
        } else if (vol->contains("hostPath")) {
          source = Str((*vol)["hostPath"], "path");
        } else {
          c.waiting_reason = "CreateContainerConfigError";
          c.waiting_message = StrCat("volume \"", vname,
                                     "\": lockstep local mounts persistentVolumeClaim, emptyDir "
                                     "and hostPath volumes only");
          return;
        }
        std::error_code ec;
        fs::create_directories(source, ec);
        Mount mount{source, Str(m, "mountPath"), {}};
        fs::path acc;
        for (const auto& part : fs::path(mount.target)) {
          acc /= part;
          if (acc != "/") mount.target_parents.push_back(acc.string());
        }
        mounts.push_back(std::move(mount));
      }
    }
    std::string cwd = Str(cs, "workingDir");
    std::string log = PodLogPath(options.state_dir, run.ns, run.name, run.uid, c.name);
    std::string hosts = run.dir + "/hosts";
    std::ofstream(c.termination_log, std::ios::trunc).close();

    std::vector<char*> cargv, cenv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (std::string& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    std::string kubeconfig_fallback = StrCat("KUBECONFIG=", sa_dir, "/kubeconfig");
    std::vector<std::string> sa_parents;
    // The child opens the directory before it mounts the pod's volumes (an emptyDir at /tmp,
    // say, may hide the state directory), at a fixed descriptor, and mounts it from there.
    constexpr int kSaFd = 1000;
    std::string sa_source = StrCat("/proc/self/fd/", kSaFd);
    // Likewise the program, executed from its descriptor (left open: a script's interpreter
    // reads the script through it).
    constexpr int kProgramFd = 1001;
    std::string program_source = StrCat("/proc/self/fd/", kProgramFd);
    if (!sa_dir.empty()) {
      fs::path acc;
      for (const auto& part : fs::path(kServiceAccountDir)) {
        acc /= part;
        if (acc != "/") sa_parents.push_back(acc.string());
      }
    }
    int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    bool private_hosts = options.private_hosts;
    // Without root, a user namespace (our own uid and gid mapped to themselves) gives the
    // child the right to make its mount namespace. Prepared before fork: the child may only
    // make system calls.
    std::string uid_map = StrCat(::getuid(), " ", ::getuid(), " 1");
    std::string gid_map = StrCat(::getgid(), " ", ::getgid(), " 1");
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      bool own_mounts = private_hosts && ::unshare(CLONE_NEWNS) == 0;
      if (private_hosts && !own_mounts && ::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
        WriteProcFile("/proc/self/setgroups", "deny");
        own_mounts = WriteProcFile("/proc/self/uid_map", uid_map.c_str()) &&
                     WriteProcFile("/proc/self/gid_map", gid_map.c_str());
      }
      if (own_mounts) {
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
        ::mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr);
      }
      // The program too: a volume (an emptyDir at /tmp, say) may hide where it lies.
      bool program_open = false;
      if (own_mounts && (!mounts.empty() || !sa_dir.empty())) {
        int fd = ::open(cargv[0], O_PATH | O_CLOEXEC);
        program_open = fd >= 0 && ::dup2(fd, kProgramFd) == kProgramFd;
        if (fd >= 0 && fd != kProgramFd) ::close(fd);
      }
      bool sa_open = false;
      if (own_mounts && !sa_dir.empty()) {
        int fd = ::open(sa_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        sa_open = fd >= 0 && ::dup2(fd, kSaFd) == kSaFd;
        if (fd >= 0 && fd != kSaFd) ::close(fd);
      }
      for (const Mount& m : mounts) {
        for (const std::string& dir : m.target_parents) ::mkdir(dir.c_str(), 0755);
        if (!own_mounts ||
            ::mount(m.source.c_str(), m.target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
          const char msg[] = "lockstep local: cannot mount a volume (needs a mount namespace)\n";
          if (log_fd >= 0) (void)!::write(log_fd, msg, sizeof(msg) - 1);
          ::_exit(125);
        }
      }
      if (!sa_dir.empty()) {
        bool mounted = false;
        if (own_mounts) {
          for (const std::string& dir : sa_parents) ::mkdir(dir.c_str(), 0755);
          mounted = sa_open &&
                    ::mount(sa_source.c_str(), kServiceAccountDir, nullptr, MS_BIND, nullptr) == 0;
        }
        if (sa_open) ::close(kSaFd);
        if (!mounted && kubeconfig_env) cenv[*kubeconfig_env] = kubeconfig_fallback.data();
      }
      if (log_fd >= 0) {
        ::dup2(log_fd, 1);
        ::dup2(log_fd, 2);
      }
      int null = ::open("/dev/null", O_RDONLY);
      if (null >= 0) ::dup2(null, 0);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
      ::execve(program_open ? program_source.c_str() : cargv[0], cargv.data(), cenv.data());
      ::_exit(127);
    }
    if (log_fd >= 0) ::close(log_fd);
    if (pid < 0) {
      c.waiting_reason = "RunContainerError";
      c.waiting_message = "fork failed";
      return;
    }
    ::setpgid(pid, pid);
    c.pid = pid;
    c.started = clock->Now();
    c.waiting_reason.clear();
    c.waiting_message.clear();
    kube::LogInfo(kLog, "started ", run.ns, "/", run.name, "/", c.name, " as pid ", pid, " (",
                  argv[0], ")");
  }

  void Reap(PodRun& run) {
    std::string policy = Str(run.pod["spec"], "restartPolicy");
    for (Container& c : run.containers) {
      if (c.pid == 0) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      ::kill(-c.pid, SIGKILL);  // whatever it left behind in its group
      int code = SignalExitCode(status);
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
      kube::LogInfo(kLog, run.ns, "/", run.name, "/", c.name, " exited with ", code);
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
                {"image", Str(run.pod["spec"]["containers"][&c - run.containers.data()], "image")},
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
      kube::LogWarning(kLog, "status of ", run.ns, "/", run.name, ": ", r.status().message());
    }
  }

  void Kill(PodRun& run, int sig) {
    for (Container& c : run.containers) {
      if (c.pid) ::kill(-c.pid, sig);
    }
  }

  void Forget(const std::string& uid) {
    auto it = runs.find(uid);
    if (it == runs.end()) return;
    Kill(it->second, SIGKILL);
    for (Container& c : it->second.containers) {
      if (c.pid) ::waitpid(c.pid, nullptr, 0);
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
      std::string node = Str(*spec, "nodeName");
      const std::string& uid = p->metadata.uid;
      if (node.empty()) {
        if (!p->metadata.deletion_timestamp) {
          (void)client->Patch(kube::resources::kPods, p->metadata.namespace_, p->metadata.name,
                              kube::PatchType::kMerge,
                              {{"spec", {{"nodeName", options.node_name}}}});
        }
        continue;
      }
      if (node != options.node_name) continue;
      seen.insert(uid);
      auto it = runs.find(uid);
      if (it == runs.end()) {
        std::string phase = api::ObjectAt(pod, "status") ? Str(pod["status"], "phase") : "";
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
            container.name = Str(c, "name");
            container.termination_log = run.dir + "/" + container.name + ".termination-log";
            run.containers.push_back(std::move(container));
          }
        }
        it = runs.emplace(uid, std::move(run)).first;
        hosts_text.clear();  // a new file to fill
      }
      PodRun& run = it->second;
      run.pod = pod;
      if (p->metadata.deletion_timestamp && !run.terminating) {
        run.terminating = true;
        int64_t grace = p->metadata.deletion_grace_period_seconds.value_or(30);
        run.kill_at = clock->Monotonic() + absl::Seconds(grace);
        Kill(run, SIGTERM);
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
        while (c.pid && ::waitpid(c.pid, nullptr, WNOHANG) == 0 && clock->Monotonic() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (c.pid) {
          ::kill(-c.pid, SIGKILL);
          ::waitpid(c.pid, nullptr, 0);
          c.pid = 0;
        }
      }
    }
    runs.clear();
  }
};

Runner::Runner(kube::RestClient* client, RunnerOptions options, kube::Clock* clock)
    : impl_(std::make_unique<Impl>(client, std::move(options), clock)) {}

Runner::~Runner() { impl_->StopAll(); }

std::string PodLogPath(const std::string& state_dir, const std::string& ns, const std::string& pod,
                       const std::string& uid, const std::string& container) {
  return StrCat(state_dir, "/pods/", ns, "_", pod, "_", uid, "/", container, ".log");
}

void Runner::Run(std::stop_token stop) {
  std::jthread pods([this](std::stop_token s) { impl_->pods.Run(s); });
  std::jthread services([this](std::stop_token s) { impl_->services.Run(s); });
  if (!impl_->pods.WaitForSync(stop) || !impl_->services.WaitForSync(stop)) return;
  while (!stop.stop_requested()) {
    impl_->Tick();
    impl_->clock->SleepFor(impl_->options.tick, stop);
  }
  impl_->StopAll();
}

}  // namespace lockstep::local
