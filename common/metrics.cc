#include "common/metrics.h"

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

void MetricsRegistry::ClearGauge(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end() && it->second.type == Type::kGauge) it->second.values.clear();
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
