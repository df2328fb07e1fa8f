#pragma once
// ProgressPoller: asks each running job's chief (else worker 0) for GET /progress on threads
// of its own, beside the informers, and keeps the latest answer per job in a cache that the
// reconciler reads like any other observed state. Reconcile never waits on a pod: an
// unreachable chief costs a poller thread its fetch timeout, never a work-queue worker.
//
// Targets come from `lister` (the controller derives them from its informer caches) and are
// re-read on every round, so a job that stops running stops being polled and its reading is
// dropped. A target is polled when `interval` has passed since its last poll (at once when it
// is new). When a poll yields progress different from the cached one, `on_change` is called
// with the job key (the controller enqueues it). A failed poll keeps the last good progress
// and records the error beside it; errors alone do not call `on_change`.
//
// Driving: Run() starts `threads` threads that poll due targets and otherwise sleep on the
// Clock until the next one is due or Wake() is called. Tests drive it step by step with
// PollDue() on their own thread and a FakeClock instead.
// Thread-safety: thread-safe. `lister`, `on_change` and the source are called from poller
// threads without the poller's lock held.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/api/trainingjob_types.h"
#include "operator/trainingjob/progress.h"
#include "operator/trainingjob/progress_target.h"

namespace lockstep::trainingjob {

struct ProgressReading {
  std::optional<api::Progress> progress;  // the last good answer
  absl::Status error;                     // of the last poll, OK when it answered
  absl::Time polled_at;                   // Monotonic() when the last poll ended
};

struct ProgressPollerOptions {
  // How often a running job's chief is asked; zero turns polling off.
  absl::Duration interval = absl::Seconds(10);
  int threads = 4;
};

class ProgressPoller {
 public:
  using Lister = std::function<std::vector<ProgressTarget>()>;
  using OnChange = std::function<void(const std::string& job_key)>;

  // Pointers must outlive the poller.
  ProgressPoller(ProgressSource* source, common::Clock* clock, ProgressPollerOptions options,
                 Lister lister, OnChange on_change);

  // The latest progress polled for a job, or nullopt when none has been read.
  std::optional<api::Progress> Latest(const std::string& job_key) const;
  std::optional<ProgressReading> Reading(const std::string& job_key) const;

  // Re-reads the targets, then polls every due one on the calling thread.
  void PollDue();

  // Polls on `options.threads` threads until `stop`; returns when they have ended.
  void Run(std::stop_token stop);
  // Makes sleeping Run() threads re-read the targets now (a job just started running).
  void Wake();

  bool enabled() const { return options_.interval > absl::ZeroDuration(); }

 private:
  struct Entry {
    ProgressTarget target;
    ProgressReading reading;
    bool polled = false;
    bool in_flight = false;
  };

  // Replaces the target set with the lister's; drops entries of jobs no longer listed.
  void Refresh();
  // Refresh() when the targets are an interval old or Wake() asked; returns when it is next due.
  absl::Time MaybeRefresh();
  // Marks the next due target in flight and returns it; otherwise the time the next is due.
  std::optional<ProgressTarget> TakeDue(absl::Time* next_due);
  void Poll(const ProgressTarget& target);
  void Loop(std::stop_token stop);

  ProgressSource* source_;
  common::Clock* clock_;
  ProgressPollerOptions options_;
  Lister lister_;
  OnChange on_change_;

  mutable std::mutex mu_;
  std::stop_source wake_;  // requested by Wake(), then replaced
  bool refresh_requested_ = true;
  bool refreshing_ = false;  // one thread re-reads the targets at a time
  absl::Time next_refresh_ = absl::InfinitePast();
  std::map<std::string, Entry> entries_;  // by job key
};

}  // namespace lockstep::trainingjob
