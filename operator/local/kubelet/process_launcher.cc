#include "operator/local/kubelet/process_launcher.h"

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

#include "common/str_util.h"

namespace lockstep::local {

namespace fs = std::filesystem;

namespace {

// open/write/close only: safe between fork and exec.
bool WriteProcFile(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = std::strlen(text);
  bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// "/a/b/c" -> "/a", "/a/b", "/a/b/c": what the child creates before it mounts at a target.
std::vector<std::string> PathsDownTo(const std::string& target) {
  std::vector<std::string> out;
  fs::path acc;
  for (const auto& part : fs::path(target)) {
    acc /= part;
    if (acc != "/") out.push_back(acc.string());
  }
  return out;
}

class LinuxProcessLauncher final : public ProcessLauncher {
 public:
  explicit LinuxProcessLauncher(bool private_mounts) : private_mounts_(private_mounts) {}

  absl::StatusOr<int> Start(const LaunchSpec& spec) override {
    // Everything the child needs is prepared before fork: the child may only make system
    // calls.
    struct Mount {
      std::string source, target;
      std::vector<std::string> target_parents;  // mkdir'ed in the child, outermost first
    };
    std::vector<Mount> mounts;
    for (const VolumeMount& m : spec.mounts) {
      std::error_code ec;
      fs::create_directories(m.source, ec);
      mounts.push_back({m.source, m.target, PathsDownTo(m.target)});
    }
    std::vector<std::string> argv = spec.argv, env = spec.env;
    std::vector<char*> cargv, cenv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (std::string& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    std::string kubeconfig_fallback = spec.kubeconfig_fallback;
    const std::string& sa_dir = spec.service_account_dir;
    std::vector<std::string> sa_parents;
    if (!sa_dir.empty()) sa_parents = PathsDownTo(kServiceAccountDir);
    // The child opens the service-account directory before it mounts the pod's volumes (an
    // emptyDir at /tmp, say, may hide the state directory), at a fixed descriptor, and
    // mounts it from there.
    constexpr int kSaFd = 1000;
    std::string sa_source = StrCat("/proc/self/fd/", kSaFd);
    // Likewise the program, executed from its descriptor (left open: a script's interpreter
    // reads the script through it).
    constexpr int kProgramFd = 1001;
    std::string program_source = StrCat("/proc/self/fd/", kProgramFd);
    const std::string& hosts = spec.hosts_path;
    const std::string& cwd = spec.working_dir;
    int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    bool private_hosts = private_mounts_;
    // Without root, a user namespace (our own uid and gid mapped to themselves) gives the
    // child the right to make its mount namespace.
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
        if (!mounted && spec.kubeconfig_env)
          cenv[*spec.kubeconfig_env] = kubeconfig_fallback.data();
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
    if (pid < 0) return absl::ResourceExhaustedError("fork failed");
    ::setpgid(pid, pid);
    return pid;
  }

  std::optional<int> Poll(int pid) override {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
    return ExitCode(status);
  }

  void Signal(int pid, int sig) override { ::kill(-pid, sig); }

  void Wait(int pid) override { ::waitpid(pid, nullptr, 0); }

 private:
  bool private_mounts_;
};

}  // namespace

std::unique_ptr<ProcessLauncher> MakeLinuxProcessLauncher(bool private_mounts) {
  return std::make_unique<LinuxProcessLauncher>(private_mounts);
}

}  // namespace lockstep::local
