#include "operator/trainingjob/progress_poller.h"

#include <algorithm>
#include <set>
#include <thread>

#include "common/log.h"

namespace lockstep::trainingjob {

ProgressPoller::ProgressPoller(ProgressSource* source, common::Clock* clock,
                               ProgressPollerOptions options, Lister lister, OnChange on_change)
    : source_(source),
      clock_(clock),
      options_(options),
      lister_(std::move(lister)),
      on_change_(std::move(on_change)) {}

std::optional<api::Progress> ProgressPoller::Latest(const std::string& job_key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(job_key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.reading.progress;
}

std::optional<ProgressReading> ProgressPoller::Reading(const std::string& job_key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(job_key);
  if (it == entries_.end() || !it->second.polled) return std::nullopt;
  return it->second.reading;
}

void ProgressPoller::Refresh() {
  std::vector<ProgressTarget> targets = lister_();
  std::lock_guard lock(mu_);
  std::set<std::string> listed;
  for (ProgressTarget& t : targets) {
    listed.insert(t.job_key);
    Entry& e = entries_[t.job_key];
    // The last progress stays until the new pod answers: the status keeps it meanwhile too.
    if (e.target.pod_uid != t.pod_uid) e.polled = false;
    e.target = std::move(t);
  }
  std::erase_if(entries_, [&](const auto& kv) { return !listed.contains(kv.first); });
}

absl::Time ProgressPoller::MaybeRefresh() {
  {
    std::lock_guard lock(mu_);
    absl::Time now = clock_->Monotonic();
    if (refreshing_ || (!refresh_requested_ && now < next_refresh_)) return next_refresh_;
    refreshing_ = true;
    refresh_requested_ = false;
  }
  Refresh();
  std::lock_guard lock(mu_);
  refreshing_ = false;
  next_refresh_ = clock_->Monotonic() + options_.interval;
  return next_refresh_;
}

std::optional<ProgressTarget> ProgressPoller::TakeDue(absl::Time* next_due) {
  std::lock_guard lock(mu_);
  absl::Time now = clock_->Monotonic();
  *next_due = absl::InfiniteFuture();
  for (auto& [key, e] : entries_) {
    if (e.in_flight) continue;
    absl::Time due = e.polled ? e.reading.polled_at + options_.interval : now;
    if (due <= now) {
      e.in_flight = true;
      return e.target;
    }
    *next_due = std::min(*next_due, due);
  }
  return std::nullopt;
}

void ProgressPoller::Poll(const ProgressTarget& target) {
  absl::StatusOr<api::Progress> p = source_->Fetch(target.pod_ip, target.port);
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(target.job_key);
    if (it == entries_.end()) return;  // the job stopped running meanwhile
    Entry& e = it->second;
    e.in_flight = false;
    if (e.target.pod_uid != target.pod_uid) return;  // its pod was replaced meanwhile
    e.polled = true;
    e.reading.polled_at = clock_->Monotonic();
    e.reading.error = p.status();
    if (p.ok()) {
      changed = !e.reading.progress || *e.reading.progress != *p;
      e.reading.progress = *std::move(p);
    }
  }
  if (!p.ok()) {
    common::LogDebug("progress", target.job_key, ": no progress from ", target.pod_ip, ":",
                     target.port, ": ", p.status().message());
  }
  if (changed) on_change_(target.job_key);
}

void ProgressPoller::PollDue() {
  Refresh();
  absl::Time next;
  while (std::optional<ProgressTarget> t = TakeDue(&next)) Poll(*t);
}

void ProgressPoller::Wake() {
  std::lock_guard lock(mu_);
  refresh_requested_ = true;
  wake_.request_stop();
  wake_ = std::stop_source();
}

void ProgressPoller::Loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::stop_token woken;
    {
      std::lock_guard lock(mu_);
      woken = wake_.get_token();
    }
    absl::Time refresh = MaybeRefresh();
    absl::Time next_due;
    while (std::optional<ProgressTarget> t = TakeDue(&next_due)) {
      Poll(*t);
      if (stop.stop_requested()) return;
    }
    // Sleep until a target or the next refresh is due, shutdown, or Wake().
    std::stop_source either;
    std::stop_callback on_stop(stop, [&] { either.request_stop(); });
    std::stop_callback on_wake(woken, [&] { either.request_stop(); });
    clock_->SleepUntil(std::min(refresh, next_due), either.get_token());
  }
}

void ProgressPoller::Run(std::stop_token stop) {
  if (!enabled()) return;
  std::vector<std::jthread> threads;
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads.emplace_back([this, stop] { Loop(stop); });
  }
}

}  // namespace lockstep::trainingjob
