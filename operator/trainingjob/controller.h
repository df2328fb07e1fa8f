#pragma once
// TrainingJobController: the controller assembled (of TrainingJobs, or of served TFJobs). Informers
// on TrainingJobs and on the pods, Services and Secrets (and, with gang scheduling, PodGroups) that
// carry the lockstep.io/job-name label feed one work queue of job keys (watch -> cache -> queue ->
// reconcile -> API); N workers run the Reconciler. A child's events enqueue the job named by its
// controller owner reference and settle the expectations the reconciler registered for it. A
// ProgressPoller beside the informers reads each running job's /progress on its own threads and
// enqueues the job when its progress changed; the reconciler reads its cache. Used by the
// lockstep-operator binary (under leader election) and in-process by `lockstep local`.
// Thread-safety: Run() on one thread; Ready() and metrics() from any.

#include <atomic>
#include <memory>
#include <stop_token>
#include <string>

#include "common/clock.h"
#include "common/metrics.h"
#include "operator/kube/rest_client.h"
#include "operator/runtime/event_recorder.h"
#include "operator/runtime/watcher.h"
#include "operator/trainingjob/progress.h"
#include "operator/trainingjob/progress_poller.h"
#include "operator/trainingjob/reconciler.h"

namespace lockstep::trainingjob {

// Per-job gauges (labels namespace, job_name, kind), which the chart's alerts read.
inline constexpr char kJobStateMetric[] = "lockstep_job_state";
inline constexpr char kJobConditionMetric[] = "lockstep_job_condition";
inline constexpr char kJobRestartsMetric[] = "lockstep_job_restarts";
inline constexpr char kJobBackoffLimitMetric[] = "lockstep_job_backoff_limit";

struct ControllerOptions {
  std::string namespace_;  // empty: every namespace
  // Serve Kubeflow's kubeflow.org/v1 TFJobs (operator/tfjob/served.h) instead of TrainingJobs.
  // The two controllers run side by side; each watches only its own jobs' children (a TFJob's
  // carry training.kubeflow.org/job-name).
  bool tfjobs = false;
  int workers = 2;
  ReconcilerOptions reconciler;
  ProgressPollerOptions progress;
  absl::Duration expectation_timeout = absl::Minutes(5);
  runtime::WatcherOptions watch;  // namespace_ and label_selector are set from the above
  // Events go on a write budget of their own (metrics is set by the controller).
  runtime::EventRecorderOptions events;
};

class TrainingJobController {
 public:
  // Pointers must outlive the controller. `progress` may be null (no polling).
  TrainingJobController(kube::RestClient* client, common::Clock* clock,
                        common::MetricsRegistry* metrics, ProgressSource* progress,
                        ControllerOptions options);
  ~TrainingJobController();

  // Starts the informers, waits for their caches, then reconciles until `stop`.
  void Run(std::stop_token stop);
  // The caches have synced and workers are running.
  bool Ready() const { return ready_.load(); }
  // Keys waiting in the work queue (0 when the controller is idle).
  size_t QueueDepth() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> ready_{false};
};

}  // namespace lockstep::trainingjob
