#include "operator/trainingjob/elastic.h"

#include <algorithm>

#include "common/str_util.h"
#include "operator/api/conditions.h"
#include "operator/api/job_state.h"
#include "operator/api/validation.h"

namespace lockstep::trainingjob {
namespace {

using api::ReplicaType;

std::string Workers(int32_t n) { return StrCat(n, n == 1 ? " worker" : " workers"); }

// Why `requested` workers cannot run, "" when they can.
std::string Refusal(const api::TrainingJob& job, int32_t requested, int32_t running,
                    std::optional<int64_t> global_batch) {
  const api::Elastic& b = *job.spec.run_policy.elastic;
  if (requested < b.min_replicas || requested > b.max_replicas) {
    return StrCat("Worker replicas ", requested, " lies outside runPolicy.elastic (",
                  b.min_replicas, " to ", b.max_replicas, "); the job stays at ", Workers(running));
  }
  const int32_t chiefs = api::ReplicaCount(job.spec, ReplicaType::kChief);
  const int64_t group = chiefs + requested;
  if (global_batch && *global_batch % group != 0) {
    return StrCat("Worker replicas ", requested, " refused: the global batch ", *global_batch,
                  " does not divide over ", group, " replicas (",
                  chiefs > 0 ? StrCat(chiefs, chiefs == 1 ? " chief and " : " chiefs and ") : "",
                  Workers(requested), "); the job stays at ", Workers(running));
  }
  return "";
}

}  // namespace

bool IsElastic(const api::TrainingJob& job) {
  return job.spec.run_policy.elastic.has_value() &&
         job.spec.replica_specs.contains(ReplicaType::kWorker);
}

std::vector<PlannedEvent> HoldReplicaCounts(Observed& o) {
  std::vector<PlannedEvent> events;
  api::TrainingJob& job = o.job;
  api::TrainingJobStatus& st = job.status ? *job.status : job.status.emplace();
  if (api::IsTerminal(st.state)) return events;
  const bool elastic = IsElastic(job);
  auto held_types = [&](ReplicaType t) { return !(elastic && t == ReplicaType::kWorker); };
  auto name = [](ReplicaType t) {
    return std::string(api::NameOf<ReplicaType>(api::kReplicaTypeNames, t));
  };
  auto accepted = [&] {
    api::SetSpecRefused(&st, false, "SpecAccepted", "the job runs at its spec's replica counts",
                        job.metadata.generation, o.now);
  };
  // Before the job runs, and while it is suspended, its counts are the spec's.
  if (st.state == api::JobState::kPending || st.state == api::JobState::kSuspended ||
      job.spec.run_policy.suspend || st.replica_counts.empty()) {
    st.replica_counts.clear();
    for (const auto& [type, rs] : job.spec.replica_specs) {
      if (held_types(type)) st.replica_counts[name(type)] = rs.replicas;
    }
    accepted();
    return events;
  }
  std::vector<std::string> refused;
  for (auto& [type, rs] : job.spec.replica_specs) {
    if (!held_types(type)) continue;
    auto it = st.replica_counts.find(name(type));
    const int32_t held = it == st.replica_counts.end() ? 0 : it->second;
    if (rs.replicas == held) continue;
    refused.push_back(StrCat(name(type), " ", held, " -> ", rs.replicas));
    rs.replicas = held;
  }
  if (refused.empty()) {
    accepted();
    return events;
  }
  const std::string why =
      StrCat("replica counts are fixed while the job runs: ", StrJoin(refused, ", "),
             " refused; the job goes on at the counts it started with (set runPolicy.elastic "
             "to scale its Workers, or suspend the job first)");
  const api::Condition* c = api::FindCondition(st.conditions, api::ConditionType::kSpecRefused);
  const bool said = c != nullptr && c->status == api::ConditionStatus::kTrue && c->message == why;
  api::SetSpecRefused(&st, true, "ReplicasFixed", why, job.metadata.generation, o.now);
  if (!said) {
    events.push_back(
        {.type = EventType::kWarning, .reason = "ScaleRefused", .message = why, .essential = true});
  }
  return events;
}

std::vector<PlannedEvent> HoldElasticWorkers(Observed& o) {
  std::vector<PlannedEvent> events;
  api::TrainingJob& job = o.job;
  if (!IsElastic(job)) return events;
  api::TrainingJobStatus& st = job.status ? *job.status : job.status.emplace();
  if (api::IsTerminal(st.state)) return events;
  const api::Elastic& b = *job.spec.run_policy.elastic;
  int32_t& spec_workers = job.spec.replica_specs[ReplicaType::kWorker].replicas;
  const int32_t requested = spec_workers;
  std::optional<int64_t> global_batch;
  if (o.progress && o.progress->global_batch) {
    global_batch = o.progress->global_batch;
  } else if (st.progress && st.progress->global_batch) {
    global_batch = st.progress->global_batch;
  }
  const bool first = !st.elastic.has_value();
  api::ElasticStatus es = st.elastic.value_or(api::ElasticStatus{
      .workers = std::clamp(requested, b.min_replicas, std::max(b.min_replicas, b.max_replicas)),
      .requested = requested});
  if (first || requested != es.requested) {
    es.requested = requested;
    std::string why = Refusal(job, requested, es.workers, global_batch);
    if (why.empty()) {
      if (!first && requested != es.workers) {
        events.push_back(
            {.type = EventType::kNormal,
             .reason = "Resized",
             .message = StrCat(
                 "Worker replicas ", es.workers, " -> ", requested, ": ",
                 requested > es.workers
                     ? "the new workers join the running group at a step boundary"
                     : "the highest-indexed workers leave the running group at a step boundary",
                 " (no restart)")});
      }
      es.workers = requested;
      es.refused.clear();
    } else {
      events.push_back({.type = EventType::kWarning, .reason = "ResizeRefused", .message = why});
      es.refused = std::move(why);
    }
  }
  spec_workers = es.workers;
  st.elastic = std::move(es);
  return events;
}

}  // namespace lockstep::trainingjob
