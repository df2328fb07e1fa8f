#pragma once
// A benchmark's results kept beside it, so its figures cannot rot unnoticed: each run appends
// one JSON line (date, machine, the run's key and figures) to a history file in bench/results/,
// and is compared first with the runs recorded before it under the same key. A figure worse
// than `tolerance` times the median of the last `window` recorded runs is flagged by name; the
// caller exits non-zero when anything was flagged. Shared machines are noisy: the default
// tolerance (1.5x) flags a regression, not jitter.
// Thread-safety: call from one thread.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
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

struct HistoryOptions {
  size_t window = 5;
  double tolerance = 1.5;
};

// Compares `figures` with the history in `path` recorded under `key`, prints one line per
// figure flagged, appends this run, and returns how many were flagged.
inline int CompareAndRecord(const std::string& path, const std::string& key,
                            const std::vector<Figure>& figures, HistoryOptions options = {}) {
  std::map<std::string, std::vector<double>> past;  // oldest first
  {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || j.value("key", "") != key || !j.contains("figures") ||
          !j["figures"].is_object()) {
        continue;
      }
      for (const auto& [name, v] : j["figures"].items()) {
        if (v.is_number()) past[name].push_back(v.get<double>());
      }
    }
  }
  int flagged = 0;
  nlohmann::json record = nlohmann::json::object();
  for (const Figure& f : figures) {
    record[f.name] = f.value;
    auto it = past.find(f.name);
    if (it == past.end() || it->second.empty()) continue;
    std::vector<double> recent(
        it->second.end() - static_cast<long>(std::min(options.window, it->second.size())),
        it->second.end());
    std::sort(recent.begin(), recent.end());
    double median = recent[recent.size() / 2];
    bool worse = f.lower_is_better ? f.value > median * options.tolerance + f.slack
                                   : f.value * options.tolerance + f.slack < median;
    if (worse) {
      std::printf("REGRESSION: %s is %.3g against a median of %.3g over the last %zu runs in %s\n",
                  f.name.c_str(), f.value, median, recent.size(), path.c_str());
      ++flagged;
    }
  }
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  nlohmann::json line = {{"date", date},
                         {"host", host},
                         {"cpus", std::thread::hardware_concurrency()},
                         {"key", key},
                         {"figures", record}};
  std::ofstream(path, std::ios::app) << line.dump() << "\n";
  std::printf("recorded in %s (%zu earlier runs under \"%s\")\n", path.c_str(),
              past.empty() ? 0 : past.begin()->second.size(), key.c_str());
  return flagged;
}

}  // namespace lockstep::bench
