#include "trainer/config/cpu_limit.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace lockstep::trainer {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

std::optional<long long> Integer(std::string_view s) {
  s = Trim(s);
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::string> Slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<double> Min(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

}  // namespace

std::optional<double> CpuMaxLimit(std::string_view cpu_max) {
  cpu_max = Trim(cpu_max);
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::optional<long long> quota = Integer(cpu_max.substr(0, space));
  const std::optional<long long> period = Integer(cpu_max.substr(space + 1));
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;  // "max": none
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

std::optional<double> CfsLimit(std::string_view quota_us, std::string_view period_us) {
  const std::optional<long long> quota = Integer(quota_us);
  const std::optional<long long> period = Integer(period_us);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

std::optional<double> EnvCpuLimit(std::string_view value) {
  value = Trim(value);
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !(v > 0) ||
      !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::string CpuLimit::Describe() const {
  std::ostringstream s;
  s << cpus << " (";
  if (quota) s << "the cgroup's CPU limit " << *quota << (env_limit ? " and " : " of ");
  if (env_limit) s << "LOCKSTEP_CPU_LIMIT=" << *env_limit << " of ";
  s << affinity << " CPU" << (affinity == 1 ? "" : "s") << " in the affinity mask)";
  return s.str();
}

CpuLimit ReadCpuLimit(const std::string& root, std::optional<std::string> path,
                      std::string_view env_limit) {
  namespace fs = std::filesystem;
  CpuLimit out;
  cpu_set_t set;
  CPU_ZERO(&set);
  out.affinity = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  // cgroup v2: "0::/path" in /proc/self/cgroup; the limit is the tightest on the way up.
  if (!path) {
    std::ifstream cg("/proc/self/cgroup");
    std::string line;
    while (std::getline(cg, line)) {
      if (line.rfind("0::", 0) == 0) path = line.substr(3);
    }
  }
  if (path) {
    const fs::path top(root);
    fs::path dir = top / fs::path(*path).relative_path();
    for (int depth = 0; depth < 64; ++depth) {
      if (std::optional<std::string> max = Slurp(dir / "cpu.max")) {
        out.quota = Min(out.quota, CpuMaxLimit(*max));
      }
      if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
      dir = dir.parent_path();
    }
  }
  // cgroup v1, where mounted.
  for (const char* v1 : {"cpu,cpuacct", "cpu"}) {
    const fs::path d = fs::path(root) / v1;
    const std::optional<std::string> q = Slurp(d / "cpu.cfs_quota_us");
    const std::optional<std::string> p = Slurp(d / "cpu.cfs_period_us");
    if (q && p) {
      out.quota = Min(out.quota, CfsLimit(*q, *p));
      break;
    }
  }
  out.env_limit = EnvCpuLimit(env_limit);
  int cpus = std::max(out.affinity, 1);
  if (const std::optional<double> limit = Min(out.quota, out.env_limit)) {
    cpus = std::min(cpus, static_cast<int>(std::ceil(*limit - 1e-9)));
  }
  out.cpus = std::max(cpus, 1);
  return out;
}

}  // namespace lockstep::trainer
