#include "operator/trainingjob/reconciler.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <thread>

#include "common/log.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/trainingjob_json.h"
#include "operator/api/validation.h"
#include "operator/kube/api_error.h"
#include "operator/kube/rate_limiter.h"
#include "operator/tfjob/convert.h"
#include "operator/tfjob/served.h"
#include "operator/trainingjob/labels.h"
#include "operator/trainingjob/observe.h"

namespace lockstep::trainingjob {
namespace {

using nlohmann::json;
constexpr char kLog[] = "trainingjob";

// 32 random bytes, hex: the job's peer token.
std::string NewToken() {
  std::random_device rd;
  std::string out;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) {
    unsigned v = rd() & 0xff;
    out += kHex[v >> 4];
    out += kHex[v & 0xf];
  }
  return out;
}

template <typename T>
std::vector<std::shared_ptr<const T>> Controlled(const runtime::Cache<T>& cache,
                                                 const std::string& uid) {
  std::vector<std::shared_ptr<const T>> out;
  for (std::shared_ptr<const T>& o : cache.ByIndex(runtime::kOwnerIndex, uid)) {
    if (o->metadata.controller_uid() == uid) out.push_back(std::move(o));
  }
  return out;
}

JobObject::Decoded DecodeLeniently(const json& j) {
  JobObject::Decoded d;
  if (tfjob::IsTfJob(j)) {
    d.job = tfjob::DecodeServedTfJob(j, &d.errors);
  } else {
    d.job = api::DecodeTrainingJob(j, &d.errors, {.reject_unknown_fields = false});
  }
  return d;
}

}  // namespace

JobObject::Decoded JobObject::Decode() const { return DecodeLeniently(json::parse(json)); }

absl::StatusOr<JobObject> DecodeJobObject(const json& j) {
  JobObject::Decoded d = DecodeLeniently(j);
  if (d.job.metadata.name.empty()) {
    return absl::InvalidArgumentError(StrCat(d.job.kind, " without metadata.name"));
  }
  JobObject o{.metadata = ObserveChildMeta(d.job.metadata),
              .state = d.job.status ? d.job.status->state : api::JobState::kPending,
              .progress = ProgressSpeakerOf(d.job),
              .restart_count = d.job.status ? d.job.status->restart_count : 0,
              .json = j.dump()};
  o.managed_elsewhere = d.job.tfjob && !d.job.tfjob->managed_elsewhere.empty();
  if (d.job.spec.run_policy.backoff_limit != std::numeric_limits<int32_t>::max()) {
    o.backoff_limit = d.job.spec.run_policy.backoff_limit;
  }
  if (d.job.status) {
    for (const api::Condition& c : d.job.status->conditions) {
      if (c.status == api::ConditionStatus::kTrue) o.true_conditions.push_back(c.type);
    }
  }
  o.json.shrink_to_fit();  // dump() grows its string by doubling
  return o;
}

absl::StatusOr<ObjectHeader> DecodeObjectHeader(const json& j) {
  if (!j.is_object() || !j.contains("metadata")) {
    return absl::InvalidArgumentError("object without metadata");
  }
  api::FieldErrors errors;
  ObjectHeader h{
      ObserveChildMeta(api::DecodeObjectMeta(j["metadata"], api::FieldPath("metadata"), &errors))};
  if (h.metadata.name().empty()) {
    return absl::InvalidArgumentError("object without metadata.name");
  }
  return h;
}

std::string ControllerKey(const ChildMeta& m) {
  if (m.controller_job().empty()) return "";
  return runtime::ObjectKey(m.namespace_(), m.controller_job());
}

void DeclareReconcilerMetrics(common::MetricsRegistry* m) {
  m->AddCounter(kPodsCreatedMetric, "Pods created, by replica type.");
  m->AddCounter(kPodsDeletedMetric, "Pods deleted, by reason kind.");
  m->AddCounter(kRestartsMetric, "Restarts counted against backoffLimit.");
  m->AddCounter(kReconcileErrorsMetric, "Reconciles that ended in an error.");
  m->AddHistogram(kRecoverySecondsMetric,
                  "In-place recoveries: a member's failure seen to every rank stepping again.",
                  {0.5, 1, 2, 5, 10, 30, 60, 120, 300});
  m->AddHistogram(kReconcileLatencyMetric,
                  "Time one reconcile of a TrainingJob took: planning and API calls, without the "
                  "waits for the client-side rate limiter; writes=none for a reconcile that "
                  "sent nothing, some for one that wrote.",
                  common::LatencyBuckets());
  m->AddHistogram(kThrottleWaitMetric,
                  "Time one reconcile of a TrainingJob waited for the client-side rate limiter "
                  "(--qps, --burst).",
                  common::LatencyBuckets());
}

Reconciler::Reconciler(ReconcilerDeps deps, ReconcilerOptions options)
    : d_(deps), options_(std::move(options)) {}

void Reconciler::Record(const api::TrainingJob& job, runtime::EventType type,
                        const std::string& reason, const std::string& message, bool essential) {
  if (d_.events == nullptr) return;
  d_.events->Record({.api_version = job.api_version,
                     .kind = job.kind,
                     .namespace_ = job.metadata.namespace_,
                     .name = job.metadata.name,
                     .uid = job.metadata.uid},
                    type, reason, message, essential);
}

absl::StatusOr<runtime::ReconcileResult> Reconciler::Reconcile(const std::string& key) {
  auto started = std::chrono::steady_clock::now();
  const absl::Duration throttled_before = kube::TokenBucket::WaitedOnThisThread();
  std::shared_ptr<const JobObject> cached = d_.jobs->Get(key);
  if (!cached) {
    d_.expectations->Forget(key);
    return runtime::ReconcileResult{};
  }
  if (cached->metadata.deletion_timestamp) return runtime::ReconcileResult{};
  if (!d_.expectations->Satisfied(key)) {
    common::LogDebug(kLog, key, ": waiting for ", d_.expectations->Outstanding(key),
                     " of its own writes to come back through the watch");
    return runtime::ReconcileResult{.requeue_after = absl::Minutes(5)};
  }

  Observed o;
  JobObject::Decoded decoded = cached->Decode();
  if (decoded.job.tfjob && !decoded.job.tfjob->managed_elsewhere.empty()) {
    // Another controller's (runPolicy.managedBy): neither its status nor its pods are ours.
    common::LogDebug(kLog, key, ": managed by ", decoded.job.tfjob->managed_elsewhere,
                     "; not reconciled here");
    return runtime::ReconcileResult{};
  }
  o.job = std::move(decoded.job);
  o.decode_errors = std::move(decoded.errors);
  const api::TrainingJob& job = o.job;
  o.pods = Controlled(*d_.pods, job.metadata.uid);
  for (const auto& s : Controlled(*d_.services, job.metadata.uid)) {
    o.services.push_back({std::string(s->metadata.name()), std::string(s->metadata.uid()),
                          s->metadata.replica_type, s->metadata.replica_index,
                          s->metadata.deletion_timestamp.has_value()});
  }
  o.token_secret_exists =
      d_.secrets->Get(runtime::ObjectKey(job.metadata.namespace_,
                                         TokenSecretName(job.metadata.name))) != nullptr;
  if (d_.pod_groups != nullptr) {
    // The PodGroup is named after the job (DesiredPodGroup).
    o.pod_group_exists = d_.pod_groups->Get(runtime::ObjectKey(job.metadata.namespace_,
                                                               job.metadata.name)) != nullptr;
  }
  // Why a pod stuck in ContainerCreating cannot mount its volumes is said only in its events.
  for (const std::shared_ptr<const ObservedPod>& pod : o.pods) {
    if (!WaitsToMount(*pod, d_.clock->Now())) continue;
    absl::StatusOr<json> events =
        d_.client->List(kube::resources::kEvents, job.metadata.namespace_,
                        {.field_selector = StrCat("involvedObject.uid=", pod->metadata.uid(),
                                                  ",reason=FailedMount")});
    if (!events.ok()) {
      common::LogDebug(kLog, key, ": reading the events of pod ", pod->metadata.name(), ": ",
                       events.status().message());
      continue;
    }
    std::string latest_time;
    std::string message;
    auto items = events->find("items");
    if (items == events->end() || !items->is_array()) continue;
    for (const json& e : *items) {
      const std::string t = api::StringAt(e, "lastTimestamp");
      if (message.empty() || t >= latest_time) {
        latest_time = t;
        message = api::StringAt(e, "message");
      }
    }
    if (!message.empty()) o.mount_failures[std::string(pod->metadata.name())] = message;
  }
  // The poller's latest reading, for a job whose chief is expected to be training.
  if (d_.progress != nullptr && IsPolled(cached->state)) o.progress = d_.progress->Latest(key);
  o.now = d_.clock->Now();

  Plan plan = MakePlan(o, options_.planner);
  const api::TrainingJobStatus old_status = job.status.value_or(api::TrainingJobStatus{});

  // Under a CRD that prunes the operator's fields (Kubeflow's own) a served TFJob's always
  // differs; the write is then a no-op for the API server, which sends no watch event.
  const bool status_changed = !job.status || plan.status != *job.status;
  if (status_changed) {
    absl::StatusOr<json> r;
    if (job.tfjob) {
      // The TFJob as cached (its resourceVersion guards the write), its status in TFJob's shape.
      json updated = json::parse(cached->json);
      updated["status"] = tfjob::EncodeServedTfJobStatus(job, plan.status);
      r = d_.client->UpdateStatus(kube::resources::kTfJobs, job.metadata.namespace_, updated);
    } else {
      api::TrainingJob updated = job;
      updated.status = plan.status;
      r = d_.client->UpdateStatus(kube::resources::kTrainingJobs, job.metadata.namespace_,
                                  api::EncodeTrainingJob(updated));
    }
    if (!r.ok()) {
      if (kube::IsApiNotFound(r.status())) return runtime::ReconcileResult{};
      if (d_.metrics) d_.metrics->Inc(kReconcileErrorsMetric);
      if (kube::IsApiConflict(r.status())) {
        common::LogDebug(kLog, key, ": status write conflicted; the cache is behind, retrying");
        return runtime::ReconcileResult{.requeue = true};
      }
      return r.status();
    }
    if (job.tfjob && r->contains("status") && !(*r)["status"].contains("state")) {
      // Kubeflow's own CRD: its schema prunes the operator's status fields, so restarts
      // counted and recoveries would be forgotten between reconciles.
      constexpr char kPruned[] =
          "the tfjobs.kubeflow.org CRD installed prunes the operator's status fields (its "
          "restart count, recoveries, progress), so restarts are not counted across "
          "reconciles: apply Lockstep's, crds/kubeflow.org_tfjobs.yaml (kubectl apply "
          "--server-side --force-conflicts)";
      if (!warned_pruned_.exchange(true)) common::LogError(kLog, kPruned);
      bool first = false;
      {
        std::lock_guard lock(pruned_mu_);
        first = pruned_uids_.insert(job.metadata.uid).second;
      }
      if (first) Record(job, runtime::EventType::kWarning, "StatusPruned", kPruned);
    }
  }
  for (const PlannedEvent& e : plan.events) {
    Record(
        job,
        e.type == EventType::kWarning ? runtime::EventType::kWarning : runtime::EventType::kNormal,
        e.reason, e.message, e.essential);
  }
  if (d_.metrics && plan.status.restart_count > old_status.restart_count) {
    d_.metrics->Inc(kRestartsMetric, {}, plan.status.restart_count - old_status.restart_count);
  }
  if (d_.metrics) {
    for (const api::RecoveryRecord& r : plan.status.recoveries) {
      if (r.planned) continue;  // an elastic change, not a recovery
      if (std::find(old_status.recoveries.begin(), old_status.recoveries.end(), r) ==
          old_status.recoveries.end()) {
        d_.metrics->Observe(kRecoverySecondsMetric, {}, r.recovery_seconds);
      }
    }
  }

  // The actions' waits are ExecuteAll's to count: its batches wait side by side.
  const absl::Duration throttled_planning =
      kube::TokenBucket::WaitedOnThisThread() - throttled_before;
  absl::Duration throttled_actions;
  absl::Status first_error = ExecuteAll(key, job, plan.actions, &throttled_actions);
  if (d_.metrics) {
    const double throttled = absl::ToDoubleSeconds(throttled_planning + throttled_actions);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // A reconcile that sends nothing measures the operator alone; one that writes, also the
    // API server's latency.
    const bool wrote = status_changed || !plan.actions.empty();
    d_.metrics->Observe(kReconcileLatencyMetric, {{"writes", wrote ? "some" : "none"}},
                        std::max(0.0, took - throttled));
    d_.metrics->Observe(kThrottleWaitMetric, {}, throttled);
  }
  if (!first_error.ok()) {
    if (d_.metrics) d_.metrics->Inc(kReconcileErrorsMetric);
    return first_error;
  }
  return runtime::ReconcileResult{.requeue_after = plan.requeue_after};
}

absl::Status Reconciler::ExecuteAll(const std::string& key, const api::TrainingJob& job,
                                    const std::vector<Action>& actions, absl::Duration* throttled) {
  constexpr size_t kFirstBatch = 4;
  absl::Status first_error;
  size_t i = 0;
  while (i < actions.size()) {
    const Action::Kind kind = actions[i].kind;
    size_t end = i + 1;
    if (kind == Action::Kind::kCreate || kind == Action::Kind::kDelete) {
      while (end < actions.size() && actions[end].kind == kind) ++end;
    }
    // Actions [i, end) in batches; the first on this thread, the others on helpers.
    bool failed = false;
    for (size_t batch = kFirstBatch; i < end && !failed; batch *= 2) {
      const size_t n = std::min(batch, end - i);
      std::vector<absl::Status> results(n);
      std::vector<absl::Duration> waits(n);
      {
        std::vector<std::jthread> helpers;
        for (size_t k = 1; k < n; ++k) {
          helpers.emplace_back([&, k] {
            absl::Duration before = kube::TokenBucket::WaitedOnThisThread();
            results[k] = Execute(key, job, actions[i + k]);
            waits[k] = kube::TokenBucket::WaitedOnThisThread() - before;
          });
        }
        absl::Duration before = kube::TokenBucket::WaitedOnThisThread();
        results[0] = Execute(key, job, actions[i]);
        waits[0] = kube::TokenBucket::WaitedOnThisThread() - before;
      }
      *throttled += *std::max_element(waits.begin(), waits.end());
      for (const absl::Status& r : results) {
        if (r.ok()) continue;
        failed = true;
        if (first_error.ok()) first_error = r;
      }
      i += n;
    }
    i = failed ? end : i;  // a failed batch skips the rest of its run
  }
  return first_error;
}

absl::Status Reconciler::Execute(const std::string& key, const api::TrainingJob& job,
                                 const Action& a) {
  const std::string& ns = job.metadata.namespace_;
  const kube::Resource& r = a.child == ChildKind::kTrainingJob && job.tfjob
                                ? kube::resources::kTfJobs
                                : ResourceOf(a.child, options_.planner.desired.gang);
  const std::string_view plural = ChildKindPlural(a.child);
  switch (a.kind) {
    case Action::Kind::kCreate:
    case Action::Kind::kCreateTokenSecret: {
      json object = a.kind == Action::Kind::kCreateTokenSecret ? DesiredTokenSecret(job, NewToken())
                                                               : a.object;
      std::string item = StrCat(plural, "/", a.name);
      d_.expectations->Expect(key, item);
      absl::StatusOr<json> res = d_.client->Create(r, ns, object);
      if (res.ok() || kube::IsApiAlreadyExists(res.status())) {
        if (!res.ok()) d_.expectations->Observe(key, item);
        if (res.ok() && a.child == ChildKind::kPod) {
          if (d_.metrics) {
            d_.metrics->Inc(kPodsCreatedMetric,
                            {{"replica_type", a.object["metadata"]["labels"].value(
                                                  std::string(kReplicaTypeLabel), "")}});
          }
          Record(job, runtime::EventType::kNormal, "SuccessfulCreatePod",
                 StrCat("Created pod ", a.name, " (", a.why, ")"));
          for (const std::string& var : a.kept_env) {
            Record(job, runtime::EventType::kWarning, "EnvironmentKept",
                   StrCat("pod ", a.name, ": ", var,
                          " is set in the template and was kept; the operator's value was not "
                          "injected"));
          }
        } else if (res.ok() && a.child == ChildKind::kService) {
          Record(job, runtime::EventType::kNormal, "SuccessfulCreateService",
                 StrCat("Created service ", a.name));
        }
        return absl::OkStatus();
      }
      d_.expectations->Observe(key, item);
      Record(job, runtime::EventType::kWarning, "FailedCreate",
             StrCat("creating ", plural, " ", a.name, ": ", res.status().message()));
      return res.status();
    }
    case Action::Kind::kDelete: {
      std::string item = StrCat(plural, "-uid/", a.uid);
      d_.expectations->Expect(key, item);
      absl::StatusOr<json> res = d_.client->Delete(r, ns, a.name, {.precondition_uid = a.uid});
      if (res.ok() || kube::IsApiNotFound(res.status()) || kube::IsApiConflict(res.status())) {
        // NotFound: already gone. Conflict: the UID precondition failed, so the name belongs
        // to a newer object that must not be touched. Either way nothing more will come.
        if (!res.ok()) d_.expectations->Observe(key, item);
        if (res.ok() && a.child == ChildKind::kPod) {
          if (d_.metrics) d_.metrics->Inc(kPodsDeletedMetric);
          Record(job, runtime::EventType::kNormal, "SuccessfulDeletePod",
                 StrCat("Deleted pod ", a.name, ": ", a.why));
        }
        return absl::OkStatus();
      }
      d_.expectations->Observe(key, item);
      Record(job, runtime::EventType::kWarning, "FailedDelete",
             StrCat("deleting ", plural, " ", a.name, ": ", res.status().message()));
      return res.status();
    }
    case Action::Kind::kPatch: {
      absl::StatusOr<json> res = d_.client->Patch(
          r, ns, a.name, a.json_patch ? kube::PatchType::kJson : kube::PatchType::kMerge, a.object);
      // NotFound: gone already. Invalid or Conflict: a JSON Patch's test failed (the pod is
      // another, or changed): its next event brings the next reconcile.
      if (res.ok() || kube::IsApiNotFound(res.status())) return absl::OkStatus();
      if (kube::IsApiInvalid(res.status()) || kube::IsApiConflict(res.status())) {
        common::LogDebug(kLog, key, ": patching ", plural, " ", a.name, " (", a.why,
                         "): ", res.status().message());
        return absl::OkStatus();
      }
      Record(job, runtime::EventType::kWarning, "FailedPatch",
             StrCat("patching ", plural, " ", a.name, " (", a.why, "): ", res.status().message()));
      return res.status();
    }
    case Action::Kind::kDeleteJob: {
      Record(job, runtime::EventType::kNormal, "TTLExpired", StrCat("Deleting the job: ", a.why),
             /*essential=*/true);
      absl::StatusOr<json> res = d_.client->Delete(
          r, ns, a.name, {.precondition_uid = a.uid, .propagation_policy = "Background"});
      if (res.ok() || kube::IsApiNotFound(res.status())) return absl::OkStatus();
      return res.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::trainingjob
