#pragma once
// A benchmark's figures against a baseline recorded deliberately for this machine, so its
// figures cannot rot unnoticed and the repository does not grow a line per run. Baselines live
// in bench/results/<benchmark>.<machine>.json, one object per run key:
//   {"jobs=5000 operator": {"date": ..., "cpus": 2, "figures": {"all_running_s": 109.3, ...}}}
// A run compares its figures with the key's baseline: one worse than `tolerance` times the
// baseline is flagged by name, and the caller exits non-zero. `--record-baseline` replaces the
// key's baseline with the run's figures (do it on a quiet machine, and commit the file with the
// change that moved them). Shared machines are noisy: the default tolerance (1.5x) flags a
// regression, not jitter. The machine's name is --machine, else $LOCKSTEP_BENCH_MACHINE, else
// the host name.
// Thread-safety: call from one thread.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::bench {

struct Figure {
  std::string name;  // e.g. "create_p99_ms"
  double value = 0;
  bool lower_is_better = true;
  double slack = 0;  // a change this small is never flagged (a count that is almost always 0)
};

struct BaselineOptions {
  double tolerance = 1.5;
  bool record = false;  // --record-baseline: replace the key's baseline with this run
};

inline std::string MachineName(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("LOCKSTEP_BENCH_MACHINE"); env != nullptr && *env != '\0') {
    return env;
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host[0] != '\0' ? host : "unknown";
}

// bench/results/<benchmark>.<machine>.json in the source tree.
inline std::string BaselinePath(const std::string& benchmark, const std::string& machine) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/bench/results/" + benchmark + "." + machine + ".json";
}

// Compares `figures` with the baseline in `path` recorded under `key` and prints one line per
// figure flagged; with options.record, writes this run as the key's baseline instead. Returns
// how many figures were flagged.
inline int CompareWithBaseline(const std::string& path, const std::string& key,
                               const std::vector<Figure>& figures, BaselineOptions options = {}) {
  nlohmann::json all = nlohmann::json::object();
  {
    std::ifstream in(path);
    if (in) {
      all = nlohmann::json::parse(in, nullptr, false);
      if (!all.is_object()) {
        std::printf("%s is not a JSON object: not compared%s\n", path.c_str(),
                    options.record ? "; it is replaced" : "");
        all = nlohmann::json::object();
      }
    }
  }
  int flagged = 0;
  nlohmann::json record = nlohmann::json::object();
  const nlohmann::json* base =
      all.contains(key) && all[key].contains("figures") ? &all[key]["figures"] : nullptr;
  for (const Figure& f : figures) {
    record[f.name] = f.value;
    if (options.record || base == nullptr || !base->contains(f.name) ||
        !(*base)[f.name].is_number()) {
      continue;
    }
    const double b = (*base)[f.name].get<double>();
    const bool worse = f.lower_is_better ? f.value > b * options.tolerance + f.slack
                                         : f.value * options.tolerance + f.slack < b;
    if (worse) {
      std::printf("REGRESSION: %s is %.3g against the baseline's %.3g (%s, %s)\n", f.name.c_str(),
                  f.value, b, path.c_str(), key.c_str());
      ++flagged;
    }
  }
  if (options.record) {
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    all[key] = {{"date", date}, {"cpus", std::thread::hardware_concurrency()}, {"figures", record}};
    std::ofstream(path) << all.dump(2) << "\n";
    std::printf("baseline for \"%s\" recorded in %s\n", key.c_str(), path.c_str());
  } else if (base == nullptr) {
    std::printf("no baseline for \"%s\" in %s: not compared (--record-baseline records one)\n",
                key.c_str(), path.c_str());
  } else {
    std::printf("compared with the baseline of %s in %s\n",
                all[key].value("date", "an unknown date").c_str(), path.c_str());
  }
  return flagged;
}

}  // namespace lockstep::bench
