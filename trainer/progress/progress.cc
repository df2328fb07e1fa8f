#include "trainer/progress/progress.h"

#include <cmath>

#include "absl/time/time.h"
#include "common/metrics.h"

namespace lockstep::trainer {

ProgressTracker::ProgressTracker(int64_t total_steps, int64_t warmup)
    : total_(total_steps), warmup_(warmup) {
  step_times_.AddHistogram(std::string(kStepDurationMetric),
                           "Time from one optimizer step's end to the next's: input wait, "
                           "compute and communication together.",
                           StepTimeBuckets());
}

void ProgressTracker::SetTotalSteps(int64_t total) {
  std::lock_guard lock(mu_);
  total_ = total;
}

void ProgressTracker::SetCorruptData(int64_t records, int64_t unreadable_bytes) {
  std::lock_guard lock(mu_);
  corrupt_records_skipped_ = records;
  corrupt_bytes_unreadable_ = unreadable_bytes;
}

void ProgressTracker::Step(int64_t step, int64_t epoch, double loss, double accuracy,
                           int64_t samples, double seconds) {
  std::lock_guard lock(mu_);
  constexpr double kAlpha = 0.05;
  loss_ = loss_ ? (1 - kAlpha) * *loss_ + kAlpha * loss : loss;
  if (!std::isnan(accuracy)) {  // NaN: nothing judged (a regression)
    accuracy_ = accuracy_ ? (1 - kAlpha) * *accuracy_ + kAlpha * accuracy : accuracy;
  }
  if (steps_seen_ > 0 && seconds >= last_seconds_) {
    step_times_.Observe(std::string(kStepDurationMetric), {}, seconds - last_seconds_);
  }
  if (steps_seen_ > 0 && seconds > last_seconds_) {
    double rate = static_cast<double>(samples) / (seconds - last_seconds_);
    recent_rate_ = recent_rate_ == 0 ? rate : (1 - kAlpha) * recent_rate_ + kAlpha * rate;
  }
  ++steps_seen_;
  if (steps_seen_ == warmup_ + 1) {
    steady_start_ = seconds;
    steady_samples_ = 0;
  } else if (steps_seen_ > warmup_ + 1) {
    steady_samples_ += samples;
  }
  last_seconds_ = seconds;
  last_samples_ = samples;
  step_ = step;
  epoch_ = epoch;
}

namespace {
constexpr size_t kKeptRecoveries = 10;
}  // namespace

void ProgressTracker::Recovered(RecoveryRecord r) {
  std::lock_guard lock(mu_);
  if (!r.planned) {  // the metrics count failures recovered, not elastic changes
    ++recoveries_total_;
    last_recovery_seconds_ = r.seconds;
  }
  recoveries_.push_back(std::move(r));
  if (recoveries_.size() > kKeptRecoveries) recoveries_.erase(recoveries_.begin());
}

void ProgressTracker::Checkpointed(int64_t step) {
  std::lock_guard lock(mu_);
  last_checkpoint_ = step;
}

void ProgressTracker::SetGroup(int replicas, int64_t global_batch) {
  std::lock_guard lock(mu_);
  replicas_ = replicas;
  global_batch_ = global_batch;
}

double ProgressTracker::SteadySamplesPerSecond() const {
  std::lock_guard lock(mu_);
  if (steady_samples_ == 0 || last_seconds_ <= steady_start_) return 0;
  return static_cast<double>(steady_samples_) / (last_seconds_ - steady_start_);
}

nlohmann::json ProgressTracker::ProgressJson() const {
  std::lock_guard lock(mu_);
  nlohmann::json j = {{"step", step_}, {"totalSteps", total_}, {"epoch", epoch_}};
  if (loss_) j["loss"] = *loss_;
  if (accuracy_) j["metrics"]["accuracy"] = *accuracy_;
  if (recent_rate_ > 0) {
    j["samplesPerSecond"] = recent_rate_;
  }
  if (last_checkpoint_) j["lastCheckpointStep"] = *last_checkpoint_;
  if (replicas_ > 0) j["replicas"] = replicas_;
  if (global_batch_ > 0) j["globalBatch"] = global_batch_;
  for (const RecoveryRecord& r : recoveries_) {
    // The shape of status.recoveries' entries (the operator adds the attempt).
    const absl::Time seen = absl::UnixEpoch() + absl::Seconds(r.detected_unix);
    j["recoveries"].push_back(
        {{"epoch", r.epoch},
         {"replaced", r.replaced},
         {"cause", r.cause},
         {"time", absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", seen, absl::UTCTimeZone())},
         {"rendezvousSeconds", r.rendezvous_seconds},
         {"stateTransferSeconds", r.transfer_seconds},
         {"recoverySeconds", r.seconds},
         {"resumedStep", r.resumed_step},
         {"stepsLost", r.steps_lost},
         {"planned", r.planned},
         {"replicas", r.replicas}});
  }
  if (recent_rate_ > 0 && last_samples_ > 0 && total_ >= step_) {
    j["estimatedRemainingSeconds"] = static_cast<int64_t>(
        std::llround(static_cast<double>((total_ - step_) * last_samples_) / recent_rate_));
  }
  return j;
}

std::vector<double> StepTimeBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

std::string ProgressTracker::MetricsText() const {
  common::MetricsRegistry m;
  m.AddGauge("lockstep_trainer_step", "Optimizer steps taken.");
  m.AddGauge("lockstep_trainer_total_steps", "Steps this run will take.");
  m.AddGauge("lockstep_trainer_epoch", "Current epoch.");
  m.AddGauge("lockstep_trainer_loss", "Training loss (moving average).");
  m.AddGauge("lockstep_trainer_accuracy", "Training accuracy (moving average).");
  m.AddGauge("lockstep_trainer_samples_per_second", "Training throughput (moving average).");
  m.AddGauge("lockstep_trainer_last_checkpoint_step", "Step of the last checkpoint written.");
  m.AddCounter("lockstep_trainer_recoveries_total",
               "In-place recoveries of the group (a lost peer replaced without a restart).");
  m.AddGauge("lockstep_trainer_last_recovery_seconds",
             "The last in-place recovery: failure seen to the first step completed again.");
  m.AddCounter("lockstep_trainer_corrupt_records_skipped_total",
               "Corrupt TFRecord records skipped while reading the data (skip_corrupt).");
  m.AddCounter("lockstep_trainer_corrupt_bytes_unreadable_total",
               "Bytes of TFRecord files that could not be read past a corrupt record length "
               "(skip_corrupt: the rest of each such file is lost).");
  common::AddProcessMetrics(&m);
  {
    std::lock_guard lock(mu_);
    m.Set("lockstep_trainer_step", {}, static_cast<double>(step_));
    m.Set("lockstep_trainer_total_steps", {}, static_cast<double>(total_));
    m.Set("lockstep_trainer_epoch", {}, static_cast<double>(epoch_));
    if (loss_) m.Set("lockstep_trainer_loss", {}, *loss_);
    if (accuracy_) m.Set("lockstep_trainer_accuracy", {}, *accuracy_);
    m.Set("lockstep_trainer_samples_per_second", {}, recent_rate_);
    m.SetTotal("lockstep_trainer_corrupt_records_skipped_total", {},
               static_cast<double>(corrupt_records_skipped_));
    m.SetTotal("lockstep_trainer_corrupt_bytes_unreadable_total", {},
               static_cast<double>(corrupt_bytes_unreadable_));
    m.SetTotal("lockstep_trainer_recoveries_total", {}, static_cast<double>(recoveries_total_));
    if (recoveries_total_ > 0) {
      m.Set("lockstep_trainer_last_recovery_seconds", {}, last_recovery_seconds_);
    }
    if (last_checkpoint_) {
      m.Set("lockstep_trainer_last_checkpoint_step", {}, static_cast<double>(*last_checkpoint_));
    }
  }
  std::string text = m.Render();
  // The step times are kept across scrapes (a histogram is cumulative): rendered from the
  // tracker's own registry, after the rest.
  return text + step_times_.Render();
}

absl::StatusOr<std::unique_ptr<common::EndpointServer>> ServeProgress(
    const ProgressTracker* tracker, const std::string& address, int port) {
  return common::EndpointServer::Start(
      address + ":" + std::to_string(port),
      [tracker](const std::string& path) -> common::EndpointResponse {
        if (path == "/progress") {
          return {200, "application/json", tracker->ProgressJson().dump() + "\n"};
        }
        if (path == "/metrics") {
          return {200, "text/plain; version=0.0.4; charset=utf-8", tracker->MetricsText()};
        }
        if (path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
        return {404, "text/plain; charset=utf-8", "not found\n"};
      });
}

}  // namespace lockstep::trainer
