#pragma once
// What the benchmarks share: percentiles, a process's resident memory, starting processes and
// `lockstep local serve`, and the TrainingJob they load the controller with.
// Thread-safety: pure functions.

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::bench {

// The value at fraction `p` (0-1) of `v` sorted; 0 for none.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// VmRSS of a process in KiB (0 when it is gone).
inline long RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

// CPU time a process has used, user and system, in seconds (0 when it is gone).
inline double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name, which is in parentheses and may hold spaces: state is the
  // 3rd field, utime the 14th and stime the 15th.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i >= 14) ticks += std::atof(f.c_str());
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Starts `argv` (argv[0] a path) with stdout and stderr to `log`; the child's pid.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stdout);
    std::freopen(log.c_str(), "a", stderr);
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  return pid;
}

// The URL a `lockstep local serve --state-dir DIR` records in DIR/server.json once it serves;
// "" when none came within 30 s.
inline std::string AwaitServerUrl(const std::string& dir) {
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(dir + "/server.json");
    nlohmann::json info = nlohmann::json::parse(in, nullptr, false);
    if (info.is_object() && info.contains("url") && info["url"].is_string()) return info["url"];
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

// A MultiWorkerMirrored job of 4 replicas (a chief and 3 workers) whose pods exit with a
// retryable code are restarted (restartPolicy ExitCode).
inline nlohmann::json MultiWorkerMirroredJob(const std::string& name, const std::string& ns) {
  nlohmann::json container = {
      {"name", "lockstep"}, {"image", "lockstep/trainer:0.1.0"}, {"args", {"--model=mlp"}}};
  nlohmann::json tmpl = nlohmann::json::object();
  tmpl["spec"]["containers"] = nlohmann::json::array({container});
  nlohmann::json j = {{"apiVersion", "lockstep.io/v1alpha1"}, {"kind", "TrainingJob"}};
  j["metadata"] = {{"name", name}, {"namespace", ns}};
  j["spec"]["strategy"] = "MultiWorkerMirrored";
  j["spec"]["replicaSpecs"]["Chief"] = {{"replicas", 1}, {"restartPolicy", "ExitCode"}};
  j["spec"]["replicaSpecs"]["Chief"]["template"] = tmpl;
  j["spec"]["replicaSpecs"]["Worker"] = {{"replicas", 3}, {"restartPolicy", "ExitCode"}};
  j["spec"]["replicaSpecs"]["Worker"]["template"] = tmpl;
  return j;
}

}  // namespace lockstep::bench
