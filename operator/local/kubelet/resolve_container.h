#pragma once
// ResolveContainer: what the runner starts for one container of a pod — program and argv,
// environment, volume mounts, service-account files, working directory — or why it must wait
// (the kubelet's waiting reasons ErrImagePull and CreateContainerConfigError, with a message).
// It decides from the pod and ContainerContext alone; whatever it must look up (a program on
// this machine, a Secret, a service-account token) comes through the context's functions, so
// the rules are tested as a table with no processes and no API server.
// Thread-safety: pure, given the context's functions.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace lockstep::local {

// Where Kubernetes puts a pod's service-account token, namespace and (here) kubeconfig.
inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct VolumeMount {
  std::string source;  // a directory on this machine
  std::string target;  // the container's mountPath
};

// A file the runner writes before the container starts (a configMap or secret volume's keys).
struct ProjectedFile {
  std::string path;  // on this machine
  std::string content;
  int mode = 0644;
};

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is the program's path
  std::vector<std::string> env;   // NAME=value
  std::string working_dir;        // "" for the runner's own
  std::vector<VolumeMount> mounts;
  std::vector<ProjectedFile> files;  // written (replacing what is there) before the start
  // The directory holding the service account's files, bind-mounted at kServiceAccountDir;
  // "" when the pod gets none. env[*kubeconfig_env] names the kubeconfig there; where the
  // child gets no mount namespace it is replaced by `kubeconfig_fallback`.
  std::string service_account_dir;
  std::optional<size_t> kubeconfig_env;
  std::string kubeconfig_fallback;
  std::string log_path;    // stdout and stderr, appended
  std::string hosts_path;  // bind-mounted at /etc/hosts
};

struct Waiting {
  std::string reason;  // ErrImagePull, CreateContainerConfigError
  std::string message;
};

// The pod as the runner sees it, and the lookups the rules need.
struct ContainerContext {
  std::string ns, name, uid;
  std::string pod_ip;
  std::string pod_dir;    // the runner's directory for this pod
  std::string state_dir;  // persistentVolumeClaims live under <state_dir>/volumes/<ns>/
  std::string node_name;
  std::string trainer_binary;   // what the lockstep/trainer image runs
  std::string operator_binary;  // what the lockstep/operator image runs
  std::string path;             // PATH, for the container and for finding its command
  std::string termination_log;  // LOCKSTEP_TERMINATION_LOG
  bool private_mounts = true;   // KUBECONFIG names kServiceAccountDir rather than the pod dir
  int cpus = 0;                 // this machine's CPUs, for LOCKSTEP_CPU_LIMIT (0: none given)
  // Whether `path` is an executable file.
  std::function<bool(const std::string& path)> executable;
  // A Secret's (secret true) or ConfigMap's object in the pod's namespace.
  std::function<absl::StatusOr<nlohmann::json>(bool secret, const std::string& name)> get_object;
  // Writes the service account's token, namespace and kubeconfig files and returns their
  // directory; null when pods get no service account (no API server address).
  std::function<absl::StatusOr<std::string>(const std::string& account)> service_account_files;
};

// Whether `image` ("[registry/]path[:tag][@digest]") is repository `repo`, from any registry.
bool IsImage(const std::string& image, std::string_view repo);

// $(NAME) in a command or argument becomes the value of env var NAME when the container
// defines it; $$ is a literal $; other references stay as written (the kubelet's rules).
std::string ExpandEnvRefs(const std::string& s, const std::map<std::string, std::string>& env);

// Container `index` of `pod` (which has that many containers).
std::variant<LaunchSpec, Waiting> ResolveContainer(const nlohmann::json& pod, size_t index,
                                                   const ContainerContext& ctx);

// Where the runner writes a container's log (GET .../pods/NAME/log reads it).
std::string PodLogPath(const std::string& state_dir, const std::string& ns, const std::string& pod,
                       const std::string& uid, const std::string& container);

}  // namespace lockstep::local
