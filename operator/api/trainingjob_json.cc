#include "operator/api/trainingjob_json.h"

#include <limits>

#include "operator/api/json_reader.h"

namespace lockstep::api {
namespace {

using nlohmann::json;

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMinInt64 = std::numeric_limits<int64_t>::min();

void Finish(ObjectReader& r, const DecodeOptions& options) {
  if (options.reject_unknown_fields) r.RejectUnknownFields();
}

template <typename T, typename F>
void SetIf(std::optional<T> v, F&& set) {
  if (v) set(*v);
}

// ---- spec ----

ReplicaSpec DecodeReplicaSpec(const json& j, const FieldPath& path, FieldErrors* errors,
                              const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  ReplicaSpec s;
  SetIf(r.Int32("replicas"), [&](int32_t v) { s.replicas = v; });
  SetIf(r.Enum<RestartPolicy>("restartPolicy", kRestartPolicyNames),
        [&](RestartPolicy v) { s.restart_policy = v; });
  if (const json* t = r.Get("template")) {
    s.pod_template = PodTemplate::Decode(*t, r.Path("template"), errors);
  } else if (r.ok()) {
    errors->push_back(Required(r.Path("template"), "every replica type needs a pod template"));
  }
  Finish(r, options);
  return s;
}

SchedulingPolicy DecodeSchedulingPolicy(const json& j, const FieldPath& path, FieldErrors* errors,
                                        const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  SchedulingPolicy s;
  s.min_available = r.Int32("minAvailable");
  s.queue = r.String("queue").value_or("");
  s.priority_class = r.String("priorityClass").value_or("");
  s.schedule_timeout_seconds = r.Int32("scheduleTimeoutSeconds");
  Finish(r, options);
  return s;
}

RunPolicy DecodeRunPolicy(const json& j, const FieldPath& path, FieldErrors* errors,
                          const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  RunPolicy p;
  SetIf(r.Int32("backoffLimit"), [&](int32_t v) { p.backoff_limit = v; });
  p.active_deadline_seconds = r.Int("activeDeadlineSeconds", kMinInt64, kMaxInt64);
  p.ttl_seconds_after_finished = r.Int32("ttlSecondsAfterFinished");
  SetIf(r.Enum<CleanPodPolicy>("cleanPodPolicy", kCleanPodPolicyNames),
        [&](CleanPodPolicy v) { p.clean_pod_policy = v; });
  SetIf(r.Bool("suspend"), [&](bool v) { p.suspend = v; });
  SetIf(r.Int32("pendingTimeoutSeconds"), [&](int32_t v) { p.pending_timeout_seconds = v; });
  p.progress_deadline_seconds = r.Int32("progressDeadlineSeconds");
  if (const json* s = r.Get("schedulingPolicy")) {
    p.scheduling_policy = DecodeSchedulingPolicy(*s, r.Path("schedulingPolicy"), errors, options);
  }
  p.recovery = r.Enum<Recovery>("recovery", kRecoveryNames);
  if (const json* e = r.Object("elastic")) {
    ObjectReader er(*e, r.Path("elastic"), errors);
    Elastic el;
    SetIf(er.Int32("minReplicas"), [&](int32_t v) { el.min_replicas = v; });
    SetIf(er.Int32("maxReplicas"), [&](int32_t v) { el.max_replicas = v; });
    Finish(er, options);
    p.elastic = el;
  }
  Finish(r, options);
  return p;
}

FailureRule DecodeFailureRule(const json& j, const FieldPath& path, FieldErrors* errors,
                              const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  FailureRule rule;
  if (auto a = r.Enum<FailureAction>("action", kFailureActionNames)) {
    rule.action = *a;
  } else if (r.ok() && r.Get("action") == nullptr) {
    errors->push_back(Required(r.Path("action"), "every rule needs an action"));
  }
  if (const json* ec = r.Get("onExitCodes")) {
    ObjectReader e(*ec, r.Path("onExitCodes"), errors);
    ExitCodeMatcher m;
    if (auto op = e.Enum<ExitCodeOperator>("operator", kExitCodeOperatorNames)) {
      m.op = *op;
    } else if (e.ok() && e.Get("operator") == nullptr) {
      errors->push_back(Required(e.Path("operator"), ""));
    }
    if (const json* values = e.Array("values")) {
      for (size_t i = 0; i < values->size(); ++i) {
        if (auto v = DecodeInt((*values)[i], e.Path("values").Index(i), 0, 255, errors)) {
          m.values.push_back(static_cast<int32_t>(*v));
        }
      }
    }
    Finish(e, options);
    rule.on_exit_codes = std::move(m);
  }
  rule.on_reasons = r.StringList("onReasons").value_or(std::vector<std::string>{});
  if (const json* types = r.Array("replicaTypes")) {
    for (size_t i = 0; i < types->size(); ++i) {
      FieldPath tpath = r.Path("replicaTypes").Index(i);
      if (auto name = DecodeString((*types)[i], tpath, errors)) {
        if (auto t = ParseEnum<ReplicaType>(kReplicaTypeNames, *name)) {
          rule.replica_types.push_back(*t);
        } else {
          errors->push_back(
              NotSupported(tpath, QuoteJson(*name), EnumNames<ReplicaType>(kReplicaTypeNames)));
        }
      }
    }
  }
  Finish(r, options);
  return rule;
}

TrainingJobSpec DecodeSpec(const json& j, const FieldPath& path, FieldErrors* errors,
                           const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  TrainingJobSpec spec;
  spec.strategy = r.Enum<Strategy>("strategy", kStrategyNames);
  if (const json* specs = r.Object("replicaSpecs")) {
    for (const auto& [key, value] : specs->items()) {
      FieldPath kpath = r.Path("replicaSpecs").Child(key);
      std::optional<ReplicaType> t = ParseEnum<ReplicaType>(kReplicaTypeNames, key);
      if (!t) {
        errors->push_back(
            NotSupported(kpath, QuoteJson(key), EnumNames<ReplicaType>(kReplicaTypeNames)));
        continue;
      }
      if (value.is_null()) continue;
      spec.replica_specs.emplace(*t, DecodeReplicaSpec(value, kpath, errors, options));
    }
  } else if (r.ok() && r.Get("replicaSpecs") == nullptr) {
    errors->push_back(Required(r.Path("replicaSpecs"), "a job needs at least one replica type"));
  }
  if (const json* p = r.Get("runPolicy")) {
    spec.run_policy = DecodeRunPolicy(*p, r.Path("runPolicy"), errors, options);
  }
  SetIf(r.Enum<SuccessPolicy>("successPolicy", kSuccessPolicyNames),
        [&](SuccessPolicy v) { spec.success_policy = v; });
  if (const json* fp = r.Get("failurePolicy")) {
    ObjectReader f(*fp, r.Path("failurePolicy"), errors);
    FailurePolicy policy;
    if (const json* rules = f.Array("rules")) {
      for (size_t i = 0; i < rules->size(); ++i) {
        policy.rules.push_back(
            DecodeFailureRule((*rules)[i], f.Path("rules").Index(i), errors, options));
      }
    }
    Finish(f, options);
    spec.failure_policy = std::move(policy);
  }
  if (const json* tc = r.Get("tfConfig")) {
    ObjectReader t(*tc, r.Path("tfConfig"), errors);
    SetIf(t.Bool("includeEvaluator"), [&](bool v) { spec.tf_config.include_evaluator = v; });
    spec.tf_config.cluster_domain = t.String("clusterDomain").value_or("");
    Finish(t, options);
  }
  Finish(r, options);
  return spec;
}

json EncodeSpec(const TrainingJobSpec& spec) {
  json j = json::object();
  if (spec.strategy) j["strategy"] = NameOf<Strategy>(kStrategyNames, *spec.strategy);
  json specs = json::object();
  for (const auto& [type, rs] : spec.replica_specs) {
    specs[std::string(NameOf<ReplicaType>(kReplicaTypeNames, type))] = {
        {"replicas", rs.replicas},
        {"restartPolicy", NameOf<RestartPolicy>(kRestartPolicyNames, rs.restart_policy)},
        {"template", rs.pod_template.raw()},
    };
  }
  j["replicaSpecs"] = std::move(specs);

  const RunPolicy& p = spec.run_policy;
  json run = {
      {"backoffLimit", p.backoff_limit},
      {"cleanPodPolicy", NameOf<CleanPodPolicy>(kCleanPodPolicyNames, p.clean_pod_policy)},
      {"suspend", p.suspend},
      {"pendingTimeoutSeconds", p.pending_timeout_seconds},
  };
  if (p.active_deadline_seconds) run["activeDeadlineSeconds"] = *p.active_deadline_seconds;
  if (p.ttl_seconds_after_finished) run["ttlSecondsAfterFinished"] = *p.ttl_seconds_after_finished;
  if (p.progress_deadline_seconds) run["progressDeadlineSeconds"] = *p.progress_deadline_seconds;
  if (p.recovery) run["recovery"] = NameOf<Recovery>(kRecoveryNames, *p.recovery);
  if (p.elastic) {
    run["elastic"] = {{"minReplicas", p.elastic->min_replicas},
                      {"maxReplicas", p.elastic->max_replicas}};
  }
  if (p.scheduling_policy) {
    const SchedulingPolicy& s = *p.scheduling_policy;
    json sp = json::object();
    if (s.min_available) sp["minAvailable"] = *s.min_available;
    if (!s.queue.empty()) sp["queue"] = s.queue;
    if (!s.priority_class.empty()) sp["priorityClass"] = s.priority_class;
    if (s.schedule_timeout_seconds) sp["scheduleTimeoutSeconds"] = *s.schedule_timeout_seconds;
    run["schedulingPolicy"] = std::move(sp);
  }
  j["runPolicy"] = std::move(run);
  j["successPolicy"] = NameOf<SuccessPolicy>(kSuccessPolicyNames, spec.success_policy);

  if (spec.failure_policy) {
    json rules = json::array();
    for (const FailureRule& rule : spec.failure_policy->rules) {
      json rj = {{"action", NameOf<FailureAction>(kFailureActionNames, rule.action)}};
      if (rule.on_exit_codes) {
        rj["onExitCodes"] = {
            {"operator", NameOf<ExitCodeOperator>(kExitCodeOperatorNames, rule.on_exit_codes->op)},
            {"values", rule.on_exit_codes->values}};
      }
      if (!rule.on_reasons.empty()) rj["onReasons"] = rule.on_reasons;
      if (!rule.replica_types.empty()) {
        json types = json::array();
        for (ReplicaType t : rule.replica_types)
          types.push_back(NameOf<ReplicaType>(kReplicaTypeNames, t));
        rj["replicaTypes"] = std::move(types);
      }
      rules.push_back(std::move(rj));
    }
    j["failurePolicy"] = {{"rules", std::move(rules)}};
  }
  j["tfConfig"] = {{"includeEvaluator", spec.tf_config.include_evaluator},
                   {"clusterDomain", spec.tf_config.cluster_domain}};
  return j;
}

// ---- status ----

Condition DecodeCondition(const json& j, const FieldPath& path, FieldErrors* errors,
                          const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  Condition c;
  SetIf(r.Enum<ConditionType>("type", kConditionTypeNames), [&](ConditionType v) { c.type = v; });
  SetIf(r.Enum<ConditionStatus>("status", kConditionStatusNames),
        [&](ConditionStatus v) { c.status = v; });
  c.reason = r.String("reason").value_or("");
  c.message = r.String("message").value_or("");
  SetIf(r.Time("lastTransitionTime"), [&](absl::Time t) { c.last_transition_time = t; });
  c.observed_generation = r.Int("observedGeneration", 0, kMaxInt64).value_or(0);
  Finish(r, options);
  return c;
}

// A map of non-negative 32-bit counts by name (countedFailures, incarnations).
std::map<std::string, int32_t> DecodeCounts(ObjectReader& r, const std::string& key,
                                            FieldErrors* errors) {
  std::map<std::string, int32_t> out;
  const json* counts = r.Object(key);
  if (counts == nullptr) return out;
  for (const auto& [name, value] : counts->items()) {
    if (value.is_number_integer() && value.get<int64_t>() >= 0 &&
        value.get<int64_t>() <= std::numeric_limits<int32_t>::max()) {
      out[name] = value.get<int32_t>();
    } else {
      errors->push_back(
          Invalid(r.Path(key).Child(name), value.dump(), "must be a non-negative 32-bit integer"));
    }
  }
  return out;
}

RecoveryRecord DecodeRecoveryRecord(const json& j, const FieldPath& path, FieldErrors* errors,
                                    const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  RecoveryRecord rec;
  rec.time = r.Time("time");
  rec.attempt = r.Int32("attempt").value_or(0);
  rec.epoch = r.Int("epoch", 0, kMaxInt64).value_or(0);
  rec.replaced = r.String("replaced").value_or("");
  rec.cause = r.String("cause").value_or("");
  rec.rendezvous_seconds = r.Number("rendezvousSeconds").value_or(0);
  rec.state_transfer_seconds = r.Number("stateTransferSeconds").value_or(0);
  rec.recovery_seconds = r.Number("recoverySeconds").value_or(0);
  rec.resumed_step = r.Int("resumedStep", 0, kMaxInt64).value_or(0);
  rec.steps_lost = r.Int("stepsLost", 0, kMaxInt64).value_or(0);
  rec.planned = r.Bool("planned").value_or(false);
  rec.replicas = r.Int32("replicas").value_or(0);
  Finish(r, options);
  return rec;
}

json EncodeRecoveryRecord(const RecoveryRecord& rec) {
  json j = {{"attempt", rec.attempt},
            {"epoch", rec.epoch},
            {"replaced", rec.replaced},
            {"cause", rec.cause},
            {"rendezvousSeconds", rec.rendezvous_seconds},
            {"stateTransferSeconds", rec.state_transfer_seconds},
            {"recoverySeconds", rec.recovery_seconds},
            {"resumedStep", rec.resumed_step},
            {"stepsLost", rec.steps_lost}};
  if (rec.planned) j["planned"] = true;
  if (rec.replicas > 0) j["replicas"] = rec.replicas;
  if (rec.time) j["time"] = FormatKubeTime(*rec.time);
  return j;
}

}  // namespace

Progress DecodeProgress(const json& j, const FieldPath& path, FieldErrors* errors,
                        const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  Progress p;
  p.step = r.Int("step", 0, kMaxInt64).value_or(0);
  p.total_steps = r.Int("totalSteps", 0, kMaxInt64);
  p.epoch = r.Int("epoch", 0, kMaxInt64);
  p.loss = r.Number("loss");
  if (const json* m = r.Object("metrics")) {
    ObjectReader mr(*m, r.Path("metrics"), errors);
    for (const auto& [k, v] : m->items()) {
      if (auto d = mr.Number(k)) p.metrics.emplace(k, *d);
    }
  }
  p.samples_per_second = r.Number("samplesPerSecond");
  p.last_checkpoint_step = r.Int("lastCheckpointStep", 0, kMaxInt64);
  p.estimated_remaining_seconds = r.Int("estimatedRemainingSeconds", 0, kMaxInt64);
  p.update_time = r.Time("updateTime");
  p.summary = r.String("summary").value_or("");
  p.replicas = r.Int("replicas", 1, kMaxInt64);
  p.global_batch = r.Int("globalBatch", 1, kMaxInt64);
  if (const json* recs = r.Array("recoveries")) {
    for (size_t i = 0; i < recs->size(); ++i) {
      p.recoveries.push_back(
          DecodeRecoveryRecord((*recs)[i], r.Path("recoveries").Index(i), errors, options));
    }
  }
  Finish(r, options);
  return p;
}

Evaluation DecodeEvaluation(const json& j, const FieldPath& path, FieldErrors* errors,
                            const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  Evaluation e;
  e.loss = r.Number("loss");
  if (const json* m = r.Object("metrics")) {
    ObjectReader mr(*m, r.Path("metrics"), errors);
    for (const auto& [k, v] : m->items()) {
      if (auto d = mr.Number(k)) e.metrics.emplace(k, *d);
    }
  }
  e.summary = r.String("summary").value_or("");
  Finish(r, options);
  return e;
}

json EncodeEvaluation(const Evaluation& e) {
  json j = json::object();
  if (e.loss) j["loss"] = *e.loss;
  if (!e.metrics.empty()) j["metrics"] = e.metrics;
  if (!e.summary.empty()) j["summary"] = e.summary;
  return j;
}

json EncodeProgress(const Progress& p) {
  json j = {{"step", p.step}};
  if (p.total_steps) j["totalSteps"] = *p.total_steps;
  if (p.epoch) j["epoch"] = *p.epoch;
  if (p.loss) j["loss"] = *p.loss;
  if (!p.metrics.empty()) j["metrics"] = p.metrics;
  if (p.samples_per_second) j["samplesPerSecond"] = *p.samples_per_second;
  if (p.last_checkpoint_step) j["lastCheckpointStep"] = *p.last_checkpoint_step;
  if (p.estimated_remaining_seconds)
    j["estimatedRemainingSeconds"] = *p.estimated_remaining_seconds;
  if (p.update_time) j["updateTime"] = FormatKubeTime(*p.update_time);
  if (!p.summary.empty()) j["summary"] = p.summary;
  if (p.replicas) j["replicas"] = *p.replicas;
  if (p.global_batch) j["globalBatch"] = *p.global_batch;
  for (const RecoveryRecord& rec : p.recoveries)
    j["recoveries"].push_back(EncodeRecoveryRecord(rec));
  return j;
}

TrainingJobStatus DecodeTrainingJobStatus(const json& j, const FieldPath& path, FieldErrors* errors,
                                          const DecodeOptions& options) {
  ObjectReader r(j, path, errors);
  TrainingJobStatus s;
  if (const json* conds = r.Array("conditions")) {
    for (size_t i = 0; i < conds->size(); ++i) {
      s.conditions.push_back(
          DecodeCondition((*conds)[i], r.Path("conditions").Index(i), errors, options));
    }
  }
  SetIf(r.Enum<JobState>("state", kJobStateNames), [&](JobState v) { s.state = v; });
  if (const json* rs = r.Object("replicaStatuses")) {
    for (const auto& [key, value] : rs->items()) {
      FieldPath kpath = r.Path("replicaStatuses").Child(key);
      std::optional<ReplicaType> t = ParseEnum<ReplicaType>(kReplicaTypeNames, key);
      if (!t) {
        errors->push_back(
            NotSupported(kpath, QuoteJson(key), EnumNames<ReplicaType>(kReplicaTypeNames)));
        continue;
      }
      ObjectReader rr(value, kpath, errors);
      ReplicaStatus st;
      st.active = rr.Int32("active").value_or(0);
      st.ready = rr.Int32("ready").value_or(0);
      st.succeeded = rr.Int32("succeeded").value_or(0);
      st.failed = rr.Int32("failed").value_or(0);
      st.restarts = rr.Int32("restarts").value_or(0);
      st.selector = rr.String("selector").value_or("");
      st.completed_indexes = rr.String("completedIndexes").value_or("");
      Finish(rr, options);
      s.replica_statuses.emplace(*t, st);
    }
  }
  s.ready = r.String("ready").value_or("");
  s.restart_count = r.Int32("restartCount").value_or(0);
  s.attempt = r.Int32("attempt").value_or(0);
  s.counted_failures = DecodeCounts(r, "countedFailures", errors);
  s.incarnations = DecodeCounts(r, "incarnations", errors);
  s.replica_counts = DecodeCounts(r, "replicaCounts", errors);
  if (const json* d = r.Object("disruptions")) {
    for (const auto& [name, value] : d->items()) {
      if (value.is_string()) {
        s.disruptions[name] = value.get<std::string>();
      } else {
        errors->push_back(
            Invalid(r.Path("disruptions").Child(name), value.dump(), "must be a string"));
      }
    }
  }
  if (const json* recs = r.Array("recoveries")) {
    for (size_t i = 0; i < recs->size(); ++i) {
      s.recoveries.push_back(
          DecodeRecoveryRecord((*recs)[i], r.Path("recoveries").Index(i), errors, options));
    }
  }
  if (const json* e = r.Object("elastic")) {
    ObjectReader er(*e, r.Path("elastic"), errors);
    s.elastic = ElasticStatus{.workers = er.Int32("workers").value_or(0),
                              .requested = er.Int32("requested").value_or(0),
                              .refused = er.String("refused").value_or("")};
    Finish(er, options);
  }
  s.start_time = r.Time("startTime");
  s.completion_time = r.Time("completionTime");
  s.last_reconcile_time = r.Time("lastReconcileTime");
  s.observed_generation = r.Int("observedGeneration", 0, kMaxInt64).value_or(0);
  if (const json* p = r.Get("progress")) {
    s.progress = DecodeProgress(*p, r.Path("progress"), errors, options);
  }
  if (const json* e = r.Get("evaluation")) {
    s.evaluation = DecodeEvaluation(*e, r.Path("evaluation"), errors, options);
  }
  Finish(r, options);
  return s;
}

json EncodeTrainingJobStatus(const TrainingJobStatus& s) {
  json j = json::object();
  if (!s.conditions.empty()) {
    json conds = json::array();
    for (const Condition& c : s.conditions) {
      conds.push_back({{"type", NameOf<ConditionType>(kConditionTypeNames, c.type)},
                       {"status", NameOf<ConditionStatus>(kConditionStatusNames, c.status)},
                       {"reason", c.reason},
                       {"message", c.message},
                       {"lastTransitionTime", FormatKubeTime(c.last_transition_time)},
                       {"observedGeneration", c.observed_generation}});
    }
    j["conditions"] = std::move(conds);
  }
  j["state"] = NameOf<JobState>(kJobStateNames, s.state);
  if (!s.replica_statuses.empty()) {
    json rs = json::object();
    for (const auto& [type, st] : s.replica_statuses) {
      json e = {{"active", st.active},
                {"ready", st.ready},
                {"succeeded", st.succeeded},
                {"failed", st.failed},
                {"restarts", st.restarts}};
      if (!st.selector.empty()) e["selector"] = st.selector;
      if (!st.completed_indexes.empty()) e["completedIndexes"] = st.completed_indexes;
      rs[std::string(NameOf<ReplicaType>(kReplicaTypeNames, type))] = std::move(e);
    }
    j["replicaStatuses"] = std::move(rs);
  }
  if (!s.ready.empty()) j["ready"] = s.ready;
  j["restartCount"] = s.restart_count;
  j["attempt"] = s.attempt;
  if (!s.counted_failures.empty()) j["countedFailures"] = s.counted_failures;
  if (!s.incarnations.empty()) j["incarnations"] = s.incarnations;
  if (!s.replica_counts.empty()) j["replicaCounts"] = s.replica_counts;
  if (!s.disruptions.empty()) j["disruptions"] = s.disruptions;
  for (const RecoveryRecord& rec : s.recoveries)
    j["recoveries"].push_back(EncodeRecoveryRecord(rec));
  if (s.elastic) {
    j["elastic"] = {{"workers", s.elastic->workers}, {"requested", s.elastic->requested}};
    if (!s.elastic->refused.empty()) j["elastic"]["refused"] = s.elastic->refused;
  }
  if (s.start_time) j["startTime"] = FormatKubeTime(*s.start_time);
  if (s.completion_time) j["completionTime"] = FormatKubeTime(*s.completion_time);
  if (s.last_reconcile_time) j["lastReconcileTime"] = FormatKubeTime(*s.last_reconcile_time);
  j["observedGeneration"] = s.observed_generation;
  if (s.progress) j["progress"] = EncodeProgress(*s.progress);
  if (s.evaluation) j["evaluation"] = EncodeEvaluation(*s.evaluation);
  return j;
}

TrainingJob DecodeTrainingJob(const json& j, FieldErrors* errors, const DecodeOptions& options) {
  ObjectReader r(j, FieldPath(), errors);
  TrainingJob job;
  if (!r.ok()) return job;
  std::optional<std::string> api_version = r.String("apiVersion");
  std::optional<std::string> kind = r.String("kind");
  if (!api_version) {
    errors->push_back(Required(r.Path("apiVersion"), "must be lockstep.io/v1alpha1"));
  } else if (*api_version != kApiVersion) {
    errors->push_back(NotSupported(r.Path("apiVersion"), QuoteJson(*api_version), {kApiVersion}));
  }
  if (!kind) {
    errors->push_back(Required(r.Path("kind"), "must be TrainingJob"));
  } else if (*kind != kKind) {
    errors->push_back(NotSupported(r.Path("kind"), QuoteJson(*kind), {kKind}));
  }
  if (const json* m = r.Get("metadata")) {
    job.metadata = DecodeObjectMeta(*m, r.Path("metadata"), errors);
  } else {
    errors->push_back(Required(r.Path("metadata"), "a TrainingJob needs metadata.name"));
  }
  if (const json* s = r.Get("spec")) {
    job.spec = DecodeSpec(*s, r.Path("spec"), errors, options);
  } else {
    errors->push_back(Required(r.Path("spec"), ""));
  }
  if (const json* s = r.Get("status")) {
    job.status = DecodeTrainingJobStatus(*s, r.Path("status"), errors, options);
  }
  Finish(r, options);
  return job;
}

json EncodeTrainingJob(const TrainingJob& job) {
  json j = {{"apiVersion", job.api_version},
            {"kind", job.kind},
            {"metadata", EncodeObjectMeta(job.metadata)},
            {"spec", EncodeSpec(job.spec)}};
  if (job.status) j["status"] = EncodeTrainingJobStatus(*job.status);
  return j;
}

}  // namespace lockstep::api
