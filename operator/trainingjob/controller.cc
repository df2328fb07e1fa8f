#include "operator/trainingjob/controller.h"

#include <thread>

#include "common/log.h"
#include "common/str_util.h"
#include "operator/api/enum_names.h"
#include "operator/runtime/controller.h"
#include "operator/runtime/event_recorder.h"
#include "operator/runtime/informer.h"
#include "operator/runtime/work_queue.h"
#include "operator/trainingjob/labels.h"
#include "operator/trainingjob/observe.h"

namespace lockstep::trainingjob {

struct TrainingJobController::Impl {
  Impl(kube::RestClient* c, common::Clock* clk, common::MetricsRegistry* m, ProgressSource* p,
       ControllerOptions o)
      : client(c),
        clock(clk),
        metrics(m),
        options(std::move(o)),
        jobs(client, options.tfjobs ? kube::resources::kTfJobs : kube::resources::kTrainingJobs,
             DecodeJobObject, WatchOptions(""), clock),
        pods(client, kube::resources::kPods, DecodeObservedPod, WatchOptions(ChildSelector()),
             clock),
        services(client, kube::resources::kServices, DecodeObjectHeader,
                 WatchOptions(ChildSelector()), clock),
        secrets(client, kube::resources::kSecrets, DecodeObjectHeader,
                WatchOptions(ChildSelector()), clock),
        pod_groups(NewPodGroupInformer()),
        queue(clock),
        expectations(clock, options.expectation_timeout),
        events(client, clock, EventOptions(options, m)),
        poller(p == nullptr ? nullptr : NewPoller(p)),
        reconciler({.client = client,
                    .jobs = &jobs.cache(),
                    .pods = &pods.cache(),
                    .services = &services.cache(),
                    .secrets = &secrets.cache(),
                    .pod_groups = pod_groups ? &pod_groups->cache() : nullptr,
                    .expectations = &expectations,
                    .events = &events,
                    .progress = poller.get(),
                    .metrics = metrics,
                    .clock = clock},
                   options.reconciler) {}

  static runtime::EventRecorderOptions EventOptions(const ControllerOptions& o,
                                                    common::MetricsRegistry* m) {
    runtime::EventRecorderOptions e = o.events;
    e.metrics = m;
    return e;
  }

  // The children of this controller's jobs: a served TFJob's carry Kubeflow's job-name label
  // beside ours, a TrainingJob's do not.
  std::string ChildSelector() const {
    return StrCat(kJobNameLabel, ",", options.tfjobs ? "" : "!", kKubeflowJobNameLabel);
  }

  std::unique_ptr<runtime::Informer<ObjectHeader>> NewPodGroupInformer() {
    GangScheduler gang = options.reconciler.planner.desired.gang;
    if (gang == GangScheduler::kNone) return nullptr;
    return std::make_unique<runtime::Informer<ObjectHeader>>(
        client, ResourceOf(ChildKind::kPodGroup, gang), DecodeObjectHeader,
        WatchOptions(ChildSelector()), clock);
  }

  std::unique_ptr<ProgressPoller> NewPoller(ProgressSource* source) {
    return std::make_unique<ProgressPoller>(
        source, clock, options.progress, [this] { return ProgressTargets(); },
        [this](const std::string& key) { queue.Add(key); });
  }

  // What the poller polls, from the informer caches: each polled job's chief (else worker 0).
  std::vector<ProgressTarget> ProgressTargets() const {
    std::vector<ProgressTarget> out;
    for (const auto& j : jobs.cache().List()) {
      if (!IsPolled(j->state) || j->managed_elsewhere) continue;
      std::shared_ptr<const ObservedPod> pod = pods.cache().Get(runtime::ObjectKey(
          j->metadata.namespace_(), ProgressPodName(j->metadata.name(), j->progress)));
      if (auto t = ProgressTargetOf(j->metadata, j->state, j->progress, pod.get())) {
        out.push_back(*std::move(t));
      }
    }
    return out;
  }

  runtime::WatcherOptions WatchOptions(std::string_view selector) const {
    runtime::WatcherOptions w = options.watch;
    w.namespace_ = options.namespace_;
    w.label_selector = std::string(selector);
    return w;
  }

  // Child events: enqueue the controlling job, settle the expectation.
  template <typename T>
  void WatchChildren(runtime::Informer<T>* informer, ChildKind kind) {
    // The same item names the reconciler registers (see Reconciler::Execute).
    const std::string resource(ChildKindPlural(kind));
    informer->AddHandlers({
        .on_add =
            [this, resource](const std::shared_ptr<const T>& o) {
              std::string key = ControllerKey(o->metadata);
              if (key.empty()) return;
              expectations.Observe(key, StrCat(resource, "/", o->metadata.name()));
              queue.Add(key);
            },
        .on_update =
            [this, resource](const std::shared_ptr<const T>&, const std::shared_ptr<const T>& o) {
              std::string key = ControllerKey(o->metadata);
              if (key.empty()) return;
              if (o->metadata.deletion_timestamp) {
                expectations.Observe(key, StrCat(resource, "-uid/", o->metadata.uid()));
              }
              queue.Add(key);
            },
        .on_delete =
            [this, resource](const std::shared_ptr<const T>& o) {
              std::string key = ControllerKey(o->metadata);
              if (key.empty()) return;
              expectations.Observe(key, StrCat(resource, "-uid/", o->metadata.uid()));
              queue.Add(key);
            },
    });
  }

  kube::RestClient* client;
  common::Clock* clock;
  common::MetricsRegistry* metrics;
  ControllerOptions options;
  runtime::Informer<JobObject> jobs;
  runtime::Informer<ObservedPod> pods;
  runtime::Informer<ObjectHeader> services;
  runtime::Informer<ObjectHeader> secrets;
  // Only with gang scheduling: without it the API may not serve PodGroups at all.
  std::unique_ptr<runtime::Informer<ObjectHeader>> pod_groups;
  runtime::WorkQueue queue;
  Expectations expectations;
  runtime::EventRecorder events;
  std::unique_ptr<ProgressPoller> poller;  // null without a progress source
  Reconciler reconciler;
};

TrainingJobController::TrainingJobController(kube::RestClient* client, common::Clock* clock,
                                             common::MetricsRegistry* metrics,
                                             ProgressSource* progress, ControllerOptions options)
    : impl_(std::make_unique<Impl>(client, clock, metrics, progress, std::move(options))) {
  DeclareReconcilerMetrics(metrics);
  const bool tfjobs = impl_->options.tfjobs;
  const std::string jobs_gauge = tfjobs ? "lockstep_tfjobs" : "lockstep_trainingjobs";
  metrics->AddGauge(jobs_gauge, tfjobs ? "Served TFJobs in the cache, by state."
                                       : "TrainingJobs in the cache, by state.");
  metrics->AddGauge("lockstep_workqueue_depth",
                    "Job keys ready to be reconciled (controller=tfjob: served TFJobs').");
  metrics->AddGauge(kJobStateMetric,
                    "1 for each job, labelled with its state (namespace, job_name, kind, state).");
  metrics->AddGauge(kJobConditionMetric,
                    "1 for each True condition of each job (namespace, job_name, kind, type).");
  metrics->AddGauge(kJobRestartsMetric, "Each job's status.restartCount.");
  metrics->AddGauge(kJobBackoffLimitMetric,
                    "Each job's runPolicy.backoffLimit (absent for a TFJob without one).");
  Impl* impl = impl_.get();
  metrics->AddCollector([impl, jobs_gauge, tfjobs](common::MetricsRegistry& m) {
    const std::string kind(tfjobs ? api::kTfJobKind : api::kKind);
    for (const char* g :
         {kJobStateMetric, kJobConditionMetric, kJobRestartsMetric, kJobBackoffLimitMetric}) {
      m.ClearGaugeWhere(g, "kind", kind);
    }
    for (const auto& j : impl->jobs.cache().List()) {
      if (j->managed_elsewhere) continue;  // another controller's TFJob
      const common::MetricLabels job = {{"namespace", std::string(j->metadata.namespace_())},
                                        {"job_name", std::string(j->metadata.name())},
                                        {"kind", kind}};
      auto with = [&job](const char* key, std::string_view value) {
        common::MetricLabels l = job;
        l.emplace_back(key, std::string(value));
        return l;
      };
      m.Set(kJobStateMetric,
            with("state", api::NameOf<api::JobState>(api::kJobStateNames, j->state)), 1);
      for (api::ConditionType c : j->true_conditions) {
        m.Set(kJobConditionMetric,
              with("type", api::NameOf<api::ConditionType>(api::kConditionTypeNames, c)), 1);
      }
      m.Set(kJobRestartsMetric, job, j->restart_count);
      if (j->backoff_limit) m.Set(kJobBackoffLimitMetric, job, *j->backoff_limit);
    }
    m.ClearGauge(jobs_gauge);
    std::map<api::JobState, int> counts;
    for (const api::EnumName<api::JobState>& e : api::kJobStateNames) counts[e.value] = 0;
    for (const auto& j : impl->jobs.cache().List()) {
      counts[j->state] += 1;
    }
    for (const auto& [state, n] : counts) {
      m.Set(jobs_gauge,
            {{"state", std::string(api::NameOf<api::JobState>(api::kJobStateNames, state))}}, n);
    }
    m.Set("lockstep_workqueue_depth",
          tfjobs ? common::MetricLabels{{"controller", "tfjob"}} : common::MetricLabels{},
          static_cast<double>(impl->queue.Len()));
  });
}

TrainingJobController::~TrainingJobController() = default;

size_t TrainingJobController::QueueDepth() const { return impl_->queue.Len(); }

void TrainingJobController::Run(std::stop_token stop) {
  Impl& i = *impl_;
  i.jobs.AddHandlers({
      .on_add =
          [&i](const std::shared_ptr<const JobObject>& j) {
            i.queue.Add(std::string(j->metadata.key()));
          },
      .on_update =
          [&i](const std::shared_ptr<const JobObject>& old,
               const std::shared_ptr<const JobObject>& j) {
            i.queue.Add(std::string(j->metadata.key()));
            // A job that starts running is polled at once rather than at the next round.
            if (i.poller && IsPolled(j->state) && !IsPolled(old->state)) i.poller->Wake();
          },
      .on_delete =
          [&i](const std::shared_ptr<const JobObject>& j) {
            i.queue.Add(std::string(j->metadata.key()));
          },
  });
  i.WatchChildren(&i.pods, ChildKind::kPod);
  i.WatchChildren(&i.services, ChildKind::kService);
  i.WatchChildren(&i.secrets, ChildKind::kSecret);
  if (i.pod_groups) i.WatchChildren(i.pod_groups.get(), ChildKind::kPodGroup);

  std::jthread t_jobs([&i](std::stop_token s) { i.jobs.Run(s); });
  std::jthread t_pods([&i](std::stop_token s) { i.pods.Run(s); });
  std::jthread t_services([&i](std::stop_token s) { i.services.Run(s); });
  std::jthread t_secrets([&i](std::stop_token s) { i.secrets.Run(s); });
  std::jthread t_pod_groups;
  if (i.pod_groups) t_pod_groups = std::jthread([&i](std::stop_token s) { i.pod_groups->Run(s); });
  std::stop_callback stop_informers(stop, [&] {
    t_jobs.request_stop();
    t_pods.request_stop();
    t_services.request_stop();
    t_secrets.request_stop();
    t_pod_groups.request_stop();
  });
  const char* log = i.options.tfjobs ? "tfjob" : "trainingjob";
  common::LogInfo(log, "waiting for caches to sync");
  if (!i.jobs.WaitForSync(stop) || !i.pods.WaitForSync(stop) || !i.services.WaitForSync(stop) ||
      !i.secrets.WaitForSync(stop) || (i.pod_groups && !i.pod_groups->WaitForSync(stop))) {
    return;
  }
  common::LogInfo(log, "caches synced: ", i.jobs.cache().size(), " jobs, ", i.pods.cache().size(),
                  " pods; starting ", i.options.workers, " workers");
  std::jthread t_progress;
  if (i.poller && i.poller->enabled()) {
    t_progress = std::jthread([&i, stop] { i.poller->Run(stop); });
  }
  runtime::Controller controller(
      log, &i.queue, [&i](const std::string& key) { return i.reconciler.Reconcile(key); },
      i.options.workers);
  ready_ = true;
  controller.Run(stop);
  ready_ = false;
}

}  // namespace lockstep::trainingjob
