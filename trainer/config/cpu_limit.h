#pragma once
// How many CPUs this process may use: the CPUs in its affinity mask, capped by its cgroup's CPU
// quota (cgroup v2's cpu.max, on its cgroup and every parent; or v1's cfs_quota_us /
// cfs_period_us) and by LOCKSTEP_CPU_LIMIT where set (the share `lockstep local` gives each
// container it runs, having no cgroups), rounded up as Go's runtime and the JVM round a
// fractional limit. A pod with `limits.cpu: 4` on a 64-core node gets 4, not 64. What
// `--threads=auto`, the trainer's default, resolves to.
// Thread-safety: pure functions, and reads of /proc and /sys.

#include <optional>
#include <string>
#include <string_view>

namespace lockstep::trainer {

// A cgroup v2 cpu.max file ("max 100000", "150000 100000"): the CPUs it allows, or nullopt for
// no limit (or a file that says nothing readable).
std::optional<double> CpuMaxLimit(std::string_view cpu_max);
// cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (quota -1: no limit).
std::optional<double> CfsLimit(std::string_view quota_us, std::string_view period_us);
// LOCKSTEP_CPU_LIMIT's value: CPUs as a positive number ("2", "0.5"), or nullopt.
std::optional<double> EnvCpuLimit(std::string_view value);

struct CpuLimit {
  int cpus = 1;                     // what the process may use (at least 1)
  int affinity = 0;                 // CPUs in its affinity mask
  std::optional<double> quota;      // its cgroup's CPU limit, if any
  std::optional<double> env_limit;  // LOCKSTEP_CPU_LIMIT, if set
  // "2 (the cgroup's CPU limit 1.5 of 16 CPUs in the affinity mask)"
  std::string Describe() const;
};
// This process's, read from /proc/self/cgroup and /sys/fs/cgroup, with `env_limit`
// (LOCKSTEP_CPU_LIMIT's value, "" when unset; InvalidArgument-worthy values are the caller's
// to refuse, see EnvCpuLimit). Tests give the hierarchy's `root` and the process's cgroup v2
// `path` in it.
CpuLimit ReadCpuLimit(const std::string& root = "/sys/fs/cgroup",
                      std::optional<std::string> path = std::nullopt,
                      std::string_view env_limit = "");

}  // namespace lockstep::trainer
