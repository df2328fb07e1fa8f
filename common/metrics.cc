#include "common/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace lockstep::common {
namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string LabelText(const MetricLabels& labels, const std::string& extra_key = "",
                      const std::string& extra_value = "") {
  if (labels.empty() && extra_key.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += (first ? "" : ",") + k + "=\"" + Escape(v) + "\"";
    first = false;
  }
  if (!extra_key.empty()) out += (first ? "" : ",") + extra_key + "=\"" + extra_value + "\"";
  return out + "}";
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream s;
  s.precision(12);
  s << v;
  return s.str();
}

}  // namespace

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

void MetricsRegistry::AddCounter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_.try_emplace(name, Family{Type::kCounter, help, {}, {}, {}});
}

void MetricsRegistry::AddGauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_.try_emplace(name, Family{Type::kGauge, help, {}, {}, {}});
}

void MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                   std::vector<double> buckets) {
  std::sort(buckets.begin(), buckets.end());
  std::lock_guard lock(mu_);
  families_.try_emplace(name, Family{Type::kHistogram, help, std::move(buckets), {}, {}});
}

void MetricsRegistry::Inc(const std::string& name, const MetricLabels& labels, double v) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end() && it->second.type != Type::kHistogram) it->second.values[labels] += v;
}

void MetricsRegistry::Set(const std::string& name, const MetricLabels& labels, double v) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end() && it->second.type == Type::kGauge) it->second.values[labels] = v;
}

void MetricsRegistry::SetTotal(const std::string& name, const MetricLabels& labels, double v) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end() && it->second.type == Type::kCounter) it->second.values[labels] = v;
}

void MetricsRegistry::ClearGauge(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end() && it->second.type == Type::kGauge) it->second.values.clear();
}

void MetricsRegistry::ClearGaugeWhere(const std::string& name, const std::string& key,
                                      const std::string& value) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != Type::kGauge) return;
  std::erase_if(it->second.values, [&](const auto& series) {
    for (const auto& [k, v] : series.first) {
      if (k == key && v == value) return true;
    }
    return false;
  });
}

void MetricsRegistry::Observe(const std::string& name, const MetricLabels& labels, double v) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != Type::kHistogram) return;
  Histogram& h = it->second.histograms[labels];
  const std::vector<double>& b = it->second.buckets;
  if (h.counts.empty()) h.counts.assign(b.size(), 0);
  auto pos = std::lower_bound(b.begin(), b.end(), v);
  if (pos != b.end()) h.counts[pos - b.begin()] += 1;
  h.count += 1;
  h.sum += v;
}

void MetricsRegistry::AddCollector(std::function<void(MetricsRegistry&)> collect) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::Render() {
  std::vector<std::function<void(MetricsRegistry&)>> collectors;
  {
    std::lock_guard lock(mu_);
    collectors = collectors_;
  }
  for (auto& c : collectors) c(*this);
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + type + "\n";
    if (f.type != Type::kHistogram) {
      for (const auto& [labels, v] : f.values) {
        out += name + LabelText(labels) + " " + Number(v) + "\n";
      }
      continue;
    }
    for (const auto& [labels, h] : f.histograms) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cumulative += h.counts[i];
        out += name + "_bucket" + LabelText(labels, "le", Number(f.buckets[i])) + " " +
               std::to_string(cumulative) + "\n";
      }
      out +=
          name + "_bucket" + LabelText(labels, "le", "+Inf") + " " + std::to_string(h.count) + "\n";
      out += name + "_sum" + LabelText(labels) + " " + Number(h.sum) + "\n";
      out += name + "_count" + LabelText(labels) + " " + std::to_string(h.count) + "\n";
    }
  }
  return out;
}

double MetricsRegistry::Value(const std::string& name, const MetricLabels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto v = it->second.values.find(labels);
  return v == it->second.values.end() ? 0 : v->second;
}

uint64_t MetricsRegistry::Count(const std::string& name, const MetricLabels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto h = it->second.histograms.find(labels);
  return h == it->second.histograms.end() ? 0 : h->second.count;
}

double MetricsRegistry::Sum(const std::string& name, const MetricLabels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto h = it->second.histograms.find(labels);
  return h == it->second.histograms.end() ? 0 : h->second.sum;
}

}  // namespace lockstep::common

namespace lockstep::common {
namespace {

// /proc/self/stat's fields after the command (which may hold spaces): field 3 is the state.
std::vector<std::string> ProcStatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(line.substr(close + 2));
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double v = 0;
      in >> v;
      return v;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

}  // namespace

void AddProcessMetrics(MetricsRegistry* registry) {
  registry->AddCounter("process_cpu_seconds_total",
                       "Total user and system CPU time spent in seconds.");
  registry->AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  registry->AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
  registry->AddGauge("process_start_time_seconds",
                     "Start time of the process since unix epoch in seconds.");
  registry->AddGauge("process_open_fds", "Number of open file descriptors.");
  registry->AddGauge("process_max_fds", "Maximum number of open file descriptors.");
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  const double boot = BootTimeSeconds();
  registry->AddCollector([ticks, page, boot](MetricsRegistry& m) {
    // Fields counted from the state (field 3 of stat(5)): utime 14, stime 15, starttime 22,
    // vsize 23, rss 24.
    const std::vector<std::string> f = ProcStatFields();
    auto at = [&f](size_t field) { return f.size() > field - 3 ? std::stod(f[field - 3]) : 0.0; };
    if (ticks > 0 && f.size() > 21) {
      m.SetTotal("process_cpu_seconds_total", {}, (at(14) + at(15)) / ticks);
      m.Set("process_start_time_seconds", {}, boot + at(22) / ticks);
      m.Set("process_virtual_memory_bytes", {}, at(23));
      m.Set("process_resident_memory_bytes", {}, at(24) * page);
    }
    std::error_code ec;
    double fds = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      fds += 1;
    }
    m.Set("process_open_fds", {}, fds);
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      m.Set("process_max_fds", {}, static_cast<double>(limit.rlim_cur));
    }
  });
}

}  // namespace lockstep::common
