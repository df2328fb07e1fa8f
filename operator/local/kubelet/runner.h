#pragma once
// Runner: the kubelet of `lockstep local`. It binds pending pods to its node, runs each
// container as a local process, and reports status through the API like a kubelet:
//  - images lockstep/trainer and lockstep/operator (any registry, tag or digest) run the
//    locally built lockstep-trainer and lockstep-operator with the container's args; any other
//    image runs the container's `command` when that program exists on this machine, and
//    otherwise waits with reason ErrImagePull and a message saying so; $(VAR) references to
//    the container's env in command and args are expanded as the kubelet does;
//  - the pod's service account: unless the pod sets automountServiceAccountToken: false, its
//    containers get KUBECONFIG naming a kubeconfig for this API server with a token of the
//    pod's serviceAccountName (default "default"); the API server enforces that account's RBAC;
//  - env (values, fieldRef to metadata.name/namespace/uid/labels, status.podIP, spec.nodeName;
//    secretKeyRef and configMapKeyRef), workingDir, and LOCKSTEP_TERMINATION_LOG pointing at
//    the file whose contents become the termination message;
//  - a CPU share in place of the cgroup a node would give: LOCKSTEP_CPU_LIMIT, the container's
//    limits.cpu, else this machine's CPUs divided among the tasks of its TF_CONFIG cluster (the
//    trainer's --threads=auto reads it, so a job's processes do not all take every core);
//  - every pod gets its own loopback address (127.0.x.y) as podIP, and, when the kernel allows
//    a private mount namespace (as root, or inside a user namespace otherwise), its own
//    /etc/hosts in which every Service name
//    (<svc>.<ns>.svc, .svc.cluster.local) and pod hostname resolves; the file is rewritten in
//    place as peers come and go;
//  - restartPolicy Always/OnFailure/Never with CrashLoopBackOff (10 s doubling to 5 min),
//    restartCount, exit codes and reasons (Completed, Error, signal deaths as 128+n);
//  - volumes: persistentVolumeClaim (a directory under the state directory that outlives
//    pods), emptyDir (per pod) and hostPath, bind-mounted at their mountPath;
//  - graceful deletion: SIGTERM to the container's process group, SIGKILL after the grace
//    period, then the pod is removed; a stopped runner stops every process it started.
// Logs go to <state>/pods/<namespace>_<name>_<uid>/<container>.log (PodLogPath).
// What a container runs is ResolveContainer's (resolve_container.h); starting and stopping
// processes is the ProcessLauncher's (process_launcher.h).
// Thread-safety: Run() on one thread; the destructor stops everything.

#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "operator/kube/rest_client.h"
#include "operator/local/kubelet/process_launcher.h"

namespace lockstep::local {

struct RunnerOptions {
  std::string node_name = "lockstep-local";
  std::string state_dir;        // where logs and hosts files go
  std::string trainer_binary;   // what the lockstep/trainer image runs
  std::string operator_binary;  // what the lockstep/operator image runs
  // Where pods reach the API server, and how a pod's service-account token is made; either
  // empty, pods get no KUBECONFIG.
  std::string api_server_url;
  std::function<absl::StatusOr<std::string>(const std::string& ns, const std::string& name)>
      service_account_token;
  // How often processes are checked for exits and deadlines; a pod created, changed or
  // deleted wakes the runner at once.
  absl::Duration tick = absl::Milliseconds(50);
  absl::Duration crash_backoff_initial = absl::Seconds(10);
  absl::Duration crash_backoff_max = absl::Minutes(5);
  bool private_hosts = true;  // a mount namespace per pod for /etc/hosts
  // Makes the process launcher; null for the Linux one (fork and exec on this machine).
  std::function<std::unique_ptr<ProcessLauncher>()> launcher;
};

class Runner {
 public:
  Runner(kube::RestClient* client, RunnerOptions options, common::Clock* clock);
  ~Runner();

  // Runs pods until `stop`, then stops every process it started.
  void Run(std::stop_token stop);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::local
