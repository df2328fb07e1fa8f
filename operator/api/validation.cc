#include "operator/api/validation.h"

#include <set>

#include "common/str_util.h"

namespace lockstep::api {
namespace {

constexpr size_t kMaxNameLength = 63;

std::string_view StrategyName(Strategy s) { return NameOf<Strategy>(kStrategyNames, s); }
std::string_view TypeName(ReplicaType t) { return NameOf<ReplicaType>(kReplicaTypeNames, t); }

void AtLeast(const FieldPath& path, int64_t value, int64_t min, FieldErrors* errors) {
  if (value < min) {
    errors->push_back(
        Invalid(path, std::to_string(value), StrCat("must be greater than or equal to ", min)));
  }
}

void ValidateNamespace(const ObjectMeta& m, FieldErrors* errors) {
  if (!m.namespace_.empty()) {
    // A namespace is an RFC 1123 label: a subdomain without dots, at most 63 characters.
    std::vector<std::string> ns_problems = CheckDns1123Subdomain(m.namespace_);
    if (m.namespace_.size() > kMaxNameLength) {
      ns_problems.push_back("must be no more than 63 characters");
    }
    if (m.namespace_.find('.') != std::string::npos) ns_problems.push_back("must not contain '.'");
    if (!ns_problems.empty()) {
      errors->push_back(Invalid(FieldPath("metadata").Child("namespace"), QuoteJson(m.namespace_),
                                StrJoin(ns_problems, "; ")));
    }
  }
}

void ValidateName(const TrainingJob& job, FieldErrors* errors) {
  const ObjectMeta& m = job.metadata;
  FieldPath path = FieldPath("metadata").Child("name");
  if (m.name.empty()) {
    if (m.generate_name.empty()) errors->push_back(Required(path, "a TrainingJob needs a name"));
    return;  // a generated name is checked by the API server when it is made
  }
  std::vector<std::string> problems = CheckDns1035Label(m.name);
  if (!problems.empty()) {
    errors->push_back(Invalid(
        path, QuoteJson(m.name),
        StrCat("the name prefixes pod and Service names, so it ", StrJoin(problems, "; it "))));
    return;
  }
  // The longest generated name is the highest index of each replica type.
  std::string longest;
  for (const auto& [type, rs] : job.spec.replica_specs) {
    if (rs.replicas <= 0) continue;
    std::string name = ReplicaName(job, type, rs.replicas - 1);
    if (name.size() > longest.size()) longest = name;
  }
  if (longest.size() > kMaxNameLength) {
    errors->push_back(
        Invalid(path, QuoteJson(m.name),
                StrCat("must be no more than ", kMaxNameLength - (longest.size() - m.name.size()),
                       " characters: the pod and Service name \"", longest, "\" would have ",
                       longest.size(), " characters and the limit is ", kMaxNameLength)));
  }
}

void ValidateShape(const TrainingJobSpec& spec, const FieldPath& path, FieldErrors* errors) {
  FieldPath specs = path.Child("replicaSpecs");
  if (spec.replica_specs.empty()) {
    errors->push_back(Required(specs, "a job needs at least one replica type (Chief or Worker)"));
    return;
  }
  for (const auto& [type, rs] : spec.replica_specs) {
    FieldPath rpath = specs.Child(TypeName(type)).Child("replicas");
    AtLeast(rpath, rs.replicas, 0, errors);
    if ((type == ReplicaType::kChief || type == ReplicaType::kEvaluator) && rs.replicas > 1) {
      errors->push_back({FieldErrorType::kTooMany, rpath.str(), std::to_string(rs.replicas),
                         StrCat("a job has at most 1 ", TypeName(type), " replica")});
    }
  }
  const int32_t training = TrainingReplicaCount(spec);
  const int32_t ps = ReplicaCount(spec, ReplicaType::kPS);
  if (training < 1) {
    errors->push_back(Required(specs, "a job needs at least one Chief or Worker replica to train"));
    return;
  }
  if (!spec.strategy) return;
  const Strategy s = *spec.strategy;
  std::string strategy = StrCat("strategy ", StrategyName(s));
  switch (s) {
    case Strategy::kParameterServer:
      if (ps < 1) {
        errors->push_back(
            Required(specs.Child("PS"), StrCat(strategy, " needs at least one PS replica")));
      }
      if (ReplicaCount(spec, ReplicaType::kWorker) < 1) {
        errors->push_back(Required(specs.Child("Worker"),
                                   StrCat(strategy, " needs at least one Worker replica")));
      }
      break;
    case Strategy::kMultiWorkerMirrored:
      if (spec.replica_specs.contains(ReplicaType::kPS)) {
        errors->push_back(
            Forbidden(specs.Child("PS"),
                      StrCat(strategy,
                             " all-reduces between workers and has no parameter servers; remove PS "
                             "or use strategy ParameterServer")));
      }
      break;
    case Strategy::kOneDevice:
    case Strategy::kMirrored:
    case Strategy::kCentralStorage:
      if (training != 1) {
        errors->push_back(
            Invalid(specs, std::to_string(training),
                    StrCat(strategy,
                           " trains in one process and needs exactly one Chief or Worker "
                           "replica, found ",
                           training, "; use MultiWorkerMirrored for more than one")));
      }
      if (spec.replica_specs.contains(ReplicaType::kPS)) {
        errors->push_back(
            Forbidden(specs.Child("PS"), StrCat(strategy, " has no parameter servers")));
      }
      break;
  }
}

void ValidateRunPolicy(const TrainingJobSpec& spec,
                       const std::map<std::string, std::string>& job_labels, const FieldPath& path,
                       FieldErrors* errors) {
  const RunPolicy& p = spec.run_policy;
  AtLeast(path.Child("backoffLimit"), p.backoff_limit, 0, errors);
  if (p.active_deadline_seconds) {
    AtLeast(path.Child("activeDeadlineSeconds"), *p.active_deadline_seconds, 1, errors);
  }
  if (p.ttl_seconds_after_finished) {
    AtLeast(path.Child("ttlSecondsAfterFinished"), *p.ttl_seconds_after_finished, 0, errors);
  }
  AtLeast(path.Child("pendingTimeoutSeconds"), p.pending_timeout_seconds, 1, errors);
  if (p.progress_deadline_seconds) {
    AtLeast(path.Child("progressDeadlineSeconds"), *p.progress_deadline_seconds, 1, errors);
  }
  if (p.recovery == Recovery::kInPlace &&
      EffectiveStrategy(spec) != Strategy::kMultiWorkerMirrored) {
    errors->push_back(Invalid(path.Child("recovery"), "\"InPlace\"",
                              StrCat("in-place recovery is for MultiWorkerMirrored groups, not ",
                                     NameOf<Strategy>(kStrategyNames, EffectiveStrategy(spec)),
                                     " (a ParameterServer job always replaces a lost worker "
                                     "alone)")));
  }
  if (p.elastic) {
    const FieldPath epath = path.Child("elastic");
    if (job_labels.contains("kueue.x-k8s.io/queue-name")) {
      errors->push_back(Forbidden(
          epath,
          "a job queued with Kueue (the kueue.x-k8s.io/queue-name label) runs as one Kueue "
          "pod group of a fixed size, which elastic workers would change"));
    }
    if (EffectiveStrategy(spec) != Strategy::kMultiWorkerMirrored) {
      errors->push_back(
          Forbidden(epath, StrCat("elastic workers are for MultiWorkerMirrored groups, not ",
                                  NameOf<Strategy>(kStrategyNames, EffectiveStrategy(spec)))));
    } else if (EffectiveRecovery(spec) != Recovery::kInPlace) {
      errors->push_back(
          Forbidden(epath,
                    "elastic workers join and leave the running group, which needs recovery "
                    "InPlace (a RestartGroup job restarts every pod when its members change)"));
    }
    AtLeast(epath.Child("minReplicas"), p.elastic->min_replicas, 1, errors);
    if (p.elastic->max_replicas < p.elastic->min_replicas) {
      errors->push_back(
          Invalid(epath.Child("maxReplicas"), std::to_string(p.elastic->max_replicas),
                  StrCat("must be at least minReplicas (", p.elastic->min_replicas, ")")));
    }
  }
  if (!p.scheduling_policy) return;
  const SchedulingPolicy& s = *p.scheduling_policy;
  FieldPath spath = path.Child("schedulingPolicy");
  if (s.min_available) {
    int32_t total = 0;
    for (const auto& [type, rs] : spec.replica_specs) total += rs.replicas;
    FieldPath mpath = spath.Child("minAvailable");
    AtLeast(mpath, *s.min_available, 1, errors);
    if (*s.min_available > total) {
      errors->push_back(Invalid(mpath, std::to_string(*s.min_available),
                                StrCat("must not exceed the job's ", total, " replicas")));
    }
  }
  if (s.schedule_timeout_seconds) {
    AtLeast(spath.Child("scheduleTimeoutSeconds"), *s.schedule_timeout_seconds, 1, errors);
  }
  if (!s.priority_class.empty()) {
    std::vector<std::string> problems = CheckDns1123Subdomain(s.priority_class);
    if (!problems.empty()) {
      errors->push_back(Invalid(spath.Child("priorityClass"), QuoteJson(s.priority_class),
                                StrJoin(problems, "; ")));
    }
  }
}

void ValidateFailurePolicy(const TrainingJobSpec& spec, const FieldPath& path,
                           FieldErrors* errors) {
  if (!spec.failure_policy) return;
  const std::vector<FailureRule>& rules = spec.failure_policy->rules;
  for (size_t i = 0; i < rules.size(); ++i) {
    const FailureRule& rule = rules[i];
    FieldPath rpath = path.Child("rules").Index(i);
    if (!rule.on_exit_codes && rule.on_reasons.empty()) {
      errors->push_back(Required(rpath, "a rule needs onExitCodes or onReasons to match on"));
    }
    if (rule.on_exit_codes) {
      FieldPath vpath = rpath.Child("onExitCodes").Child("values");
      const std::vector<int32_t>& values = rule.on_exit_codes->values;
      if (values.empty()) errors->push_back(Required(vpath, "list at least one exit code"));
      std::set<int32_t> seen;
      for (size_t k = 0; k < values.size(); ++k) {
        if (!seen.insert(values[k]).second) {
          errors->push_back(
              {FieldErrorType::kDuplicate, vpath.Index(k).str(), std::to_string(values[k]), ""});
        }
        if (values[k] == 0 && rule.on_exit_codes->op == ExitCodeOperator::kIn) {
          errors->push_back(Invalid(vpath.Index(k), "0",
                                    "exit code 0 means success and never matches a failure"));
        }
      }
    }
    for (size_t k = 0; k < rule.on_reasons.size(); ++k) {
      if (rule.on_reasons[k].empty()) {
        errors->push_back(
            Required(rpath.Child("onReasons").Index(k), "a reason is a non-empty word"));
      }
    }
    for (size_t k = 0; k < rule.replica_types.size(); ++k) {
      ReplicaType t = rule.replica_types[k];
      if (!spec.replica_specs.contains(t)) {
        errors->push_back(Invalid(rpath.Child("replicaTypes").Index(k), QuoteJson(TypeName(t)),
                                  "the job has no such replica type in spec.replicaSpecs"));
      }
    }
  }
}

}  // namespace

std::string ReplicaName(std::string_view job_name, ReplicaType type, int32_t index) {
  return StrCat(job_name, "-", ReplicaTypeLower(type), "-", index);
}

std::string ReplicaName(const TrainingJob& job, ReplicaType type, int32_t index) {
  return StrCat(job.metadata.name, "-", ReplicaTypeLower(job, type), "-", index);
}

int32_t ReplicaCount(const TrainingJobSpec& spec, ReplicaType type) {
  auto it = spec.replica_specs.find(type);
  return it == spec.replica_specs.end() ? 0 : it->second.replicas;
}

int32_t TrainingReplicaCount(const TrainingJobSpec& spec) {
  return ReplicaCount(spec, ReplicaType::kChief) + ReplicaCount(spec, ReplicaType::kWorker);
}

Strategy EffectiveStrategy(const TrainingJobSpec& spec) {
  if (spec.strategy) return *spec.strategy;
  if (ReplicaCount(spec, ReplicaType::kPS) > 0) return Strategy::kParameterServer;
  if (TrainingReplicaCount(spec) > 1) return Strategy::kMultiWorkerMirrored;
  return Strategy::kOneDevice;
}

Recovery EffectiveRecovery(const TrainingJobSpec& spec) {
  if (EffectiveStrategy(spec) != Strategy::kMultiWorkerMirrored) return Recovery::kRestartGroup;
  return spec.run_policy.recovery.value_or(Recovery::kInPlace);
}

FieldErrors ValidateTrainingJob(const TrainingJob& job) {
  FieldErrors errors;
  ValidateName(job, &errors);
  ValidateNamespace(job.metadata, &errors);
  FieldPath spec("spec");
  ValidateShape(job.spec, spec, &errors);
  ValidateRunPolicy(job.spec, job.metadata.labels, spec.Child("runPolicy"), &errors);
  if (job.spec.success_policy == SuccessPolicy::kAllWorkers &&
      ReplicaCount(job.spec, ReplicaType::kWorker) < 1) {
    errors.push_back(Invalid(spec.Child("successPolicy"), "\"AllWorkers\"",
                             "AllWorkers needs at least one Worker replica"));
  }
  ValidateFailurePolicy(job.spec, spec.Child("failurePolicy"), &errors);
  if (!job.spec.tf_config.cluster_domain.empty()) {
    std::vector<std::string> problems = CheckDns1123Subdomain(job.spec.tf_config.cluster_domain);
    if (!problems.empty()) {
      errors.push_back(Invalid(spec.Child("tfConfig").Child("clusterDomain"),
                               QuoteJson(job.spec.tf_config.cluster_domain),
                               StrJoin(problems, "; ")));
    }
  }
  return errors;
}

FieldErrors CheckTrainingJob(const nlohmann::json& j, TrainingJob* out,
                             const DecodeOptions& options) {
  FieldErrors errors;
  *out = DecodeTrainingJob(j, &errors, options);
  if (errors.empty()) errors = ValidateTrainingJob(*out);
  return errors;
}

absl::StatusOr<TrainingJob> TrainingJobFromJson(const nlohmann::json& j,
                                                const DecodeOptions& options) {
  TrainingJob job;
  FieldErrors errors = CheckTrainingJob(j, &job, options);
  if (!errors.empty()) {
    std::string what = job.metadata.name.empty()
                           ? std::string("TrainingJob")
                           : StrCat("TrainingJob \"", job.metadata.name, "\"");
    return ToStatus(what, errors);
  }
  return job;
}

}  // namespace lockstep::api
