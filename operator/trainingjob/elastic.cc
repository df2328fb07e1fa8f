#include "operator/trainingjob/elastic.h"

#include <algorithm>

#include "common/str_util.h"
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
