#pragma once
// Metrics: a small Prometheus registry (counters, gauges, histograms with labels) and its text
// exposition format, version 0.0.4. Collectors run at scrape time, for gauges that are a view
// of a cache (jobs by state). Debian packages no Prometheus client library for C++, and the
// operator and the trainer need only these three types.
// Thread-safety: thread-safe.

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::common {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  void AddCounter(const std::string& name, const std::string& help);
  void AddGauge(const std::string& name, const std::string& help);
  void AddHistogram(const std::string& name, const std::string& help, std::vector<double> buckets);

  // Unknown names are ignored (a metric is declared once, at startup).
  void Inc(const std::string& name, const MetricLabels& labels = {}, double v = 1);
  void Set(const std::string& name, const MetricLabels& labels, double v);
  // A counter's total as read from elsewhere (a collector's, such as the kernel's CPU time).
  void SetTotal(const std::string& name, const MetricLabels& labels, double v);
  // Drops every series of a gauge (before a collector sets them afresh).
  void ClearGauge(const std::string& name);
  // Drops the series of a gauge that carry label `key` = `value` (a collector's own, where
  // several collectors share a gauge).
  void ClearGaugeWhere(const std::string& name, const std::string& key, const std::string& value);
  void Observe(const std::string& name, const MetricLabels& labels, double v);

  void AddCollector(std::function<void(MetricsRegistry&)> collect);

  // Runs the collectors, then renders every family in name order.
  std::string Render();

  // A counter or gauge's current value (0 when absent), for tests.
  double Value(const std::string& name, const MetricLabels& labels = {}) const;
  // A histogram's observation count and sum, for tests and benchmarks.
  uint64_t Count(const std::string& name, const MetricLabels& labels = {}) const;
  double Sum(const std::string& name, const MetricLabels& labels = {}) const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Histogram {
    std::vector<uint64_t> counts;  // per bucket, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> buckets;
    std::map<MetricLabels, double> values;
    std::map<MetricLabels, Histogram> histograms;
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<std::function<void(MetricsRegistry&)>> collectors_;
};

// Latency buckets in seconds, 1 ms to 60 s.
std::vector<double> LatencyBuckets();

// The process metrics every Prometheus client exports, read from /proc at scrape time:
// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds and process_max_fds.
void AddProcessMetrics(MetricsRegistry* registry);

}  // namespace lockstep::common
