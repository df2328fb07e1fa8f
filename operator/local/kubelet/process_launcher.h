#pragma once
// ProcessLauncher: the runner's seam to the operating system. It starts a container's process
// as LaunchSpec says — its own process group; a private mount namespace (or a user namespace
// without root) where the pod's /etc/hosts, volumes and service-account files are
// bind-mounted; stdout and stderr appended to the log — and signals, polls and reaps it.
// The Linux implementation holds every fork, unshare, mount and execve of `lockstep local`.
// Thread-safety: one thread at a time (the runner's).

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "operator/local/kubelet/resolve_container.h"

namespace lockstep::local {

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process; its pid is also its process group. Errors are the launcher's own
  // (fork failed): a program that cannot start exits 125-127, as a container runtime's does.
  virtual absl::StatusOr<int> Start(const LaunchSpec& spec) = 0;
  // The exit code once the process has exited (128+n after signal n), reaping it; nullopt
  // while it runs.
  virtual std::optional<int> Poll(int pid) = 0;
  // Sends `sig` to the process's whole group.
  virtual void Signal(int pid, int sig) = 0;
  // Blocks until the process has exited and reaps it (after SIGKILL).
  virtual void Wait(int pid) = 0;
};

// fork/exec on this machine. `private_mounts`: give each process its own mount namespace
// (needed for /etc/hosts and volumes; without one they are skipped or fail the start).
std::unique_ptr<ProcessLauncher> MakeLinuxProcessLauncher(bool private_mounts);

}  // namespace lockstep::local
