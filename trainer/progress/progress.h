#pragma once
// ProgressTracker: what the trainer reports about itself, as GET /progress (the JSON the
// operator copies into status.progress) and GET /metrics (Prometheus). The training loop
// records each step; the HTTP thread reads snapshots.
// Thread-safety: thread-safe.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/http_endpoints.h"
#include "common/metrics.h"

namespace lockstep::trainer {

// One in-place recovery of a MultiWorkerMirrored group, or a planned change of an elastic
// group's members, as the chief saw it. /progress lists the last few; the operator copies them
// into status.recoveries.
struct RecoveryRecord {
  int64_t epoch = 0;              // the membership epoch the group re-formed into
  std::string replaced;           // the tasks whose process changed ("worker 1"), "" if none
  std::string cause;              // what began the epoch
  double detected_unix = 0;       // wall clock when the chief saw the failure
  double rendezvous_seconds = 0;  // failure seen -> group re-formed
  double transfer_seconds = 0;    // -> every rank holds the state
  double seconds = 0;             // failure seen -> the first step completed again
  int64_t resumed_step = 0;       // the step training went on from
  int64_t steps_lost = 0;         // completed steps not kept (the chief's before, less resumed)
  bool planned = false;           // a member joined or left (elastic), rather than a failure
  int replicas = 0;               // the group's size after
};

inline constexpr std::string_view kStepDurationMetric = "lockstep_trainer_step_duration_seconds";
// The step-time histogram's buckets, 1 ms to 30 s.
std::vector<double> StepTimeBuckets();

class ProgressTracker {
 public:
  // `warmup` steps are left out of the steady samples/s.
  explicit ProgressTracker(int64_t total_steps, int64_t warmup = 20);

  // A step finished at `seconds` (monotonic) with this batch's loss and accuracy.
  void Step(int64_t step, int64_t epoch, double loss, double accuracy, int64_t samples,
            double seconds);
  void Checkpointed(int64_t step);
  void SetTotalSteps(int64_t total);
  // What the data loading lost under a data spec's skip_corrupt: corrupt records skipped, and
  // bytes past a corrupt record length that could not be read.
  void SetCorruptData(int64_t records, int64_t unreadable_bytes);
  void Recovered(RecoveryRecord r);
  // The group training now (its replicas) and the global batch they share.
  void SetGroup(int replicas, int64_t global_batch);

  nlohmann::json ProgressJson() const;
  std::string MetricsText() const;
  // Samples per second over the steps after warm-up (0 before there are any).
  double SteadySamplesPerSecond() const;

 private:
  mutable std::mutex mu_;
  mutable common::MetricsRegistry step_times_;  // the step-time histogram (its own lock)
  int64_t total_;
  int64_t warmup_;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  std::optional<double> loss_;      // moving average
  std::optional<double> accuracy_;  // moving average
  std::optional<int64_t> last_checkpoint_;
  int64_t corrupt_records_skipped_ = 0;
  int64_t corrupt_bytes_unreadable_ = 0;
  int replicas_ = 0;
  int64_t global_batch_ = 0;
  std::vector<RecoveryRecord> recoveries_;  // the last kKeptRecoveries
  int64_t recoveries_total_ = 0;            // of failures (not planned changes)
  double last_recovery_seconds_ = 0;
  int64_t steps_seen_ = 0;
  double steady_start_ = 0;
  int64_t steady_samples_ = 0;
  double last_seconds_ = 0;
  int64_t last_samples_ = 0;
  double recent_rate_ = 0;  // samples/s, moving average
};

// Serves /progress and /metrics of `tracker` on address:port (port 0 picks one).
absl::StatusOr<std::unique_ptr<common::EndpointServer>> ServeProgress(
    const ProgressTracker* tracker, const std::string& address, int port);

}  // namespace lockstep::trainer
