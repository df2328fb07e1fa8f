#include "operator/trainingjob/failure.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/str_util.h"
#include "operator/api/validation.h"

namespace lockstep::trainingjob {
namespace {

using api::ReplicaType;

bool IsDisruptionReason(std::string_view r) {
  return r == "Evicted" || r == "Preempted" || r == "NodeLost" || r == "NodeShutdown" ||
         r == "Shutdown" || r == "Terminated" || r == "DisruptionTarget";
}

const api::ReplicaSpec* SpecOf(const api::TrainingJobSpec& spec, ReplicaType t) {
  auto it = spec.replica_specs.find(t);
  return it == spec.replica_specs.end() ? nullptr : &it->second;
}

bool RuleMatches(const api::FailureRule& rule, const PodFailure& f) {
  if (rule.replica_types.empty()) {
    if (f.type == ReplicaType::kEvaluator) return false;
  } else if (std::find(rule.replica_types.begin(), rule.replica_types.end(), f.type) ==
             rule.replica_types.end()) {
    return false;
  }
  if (rule.on_exit_codes) {
    if (!f.exit_code) return false;
    bool in = std::find(rule.on_exit_codes->values.begin(), rule.on_exit_codes->values.end(),
                        *f.exit_code) != rule.on_exit_codes->values.end();
    if ((rule.on_exit_codes->op == api::ExitCodeOperator::kIn) != in) return false;
  }
  if (!rule.on_reasons.empty() && std::find(rule.on_reasons.begin(), rule.on_reasons.end(),
                                            f.reason) == rule.on_reasons.end()) {
    return false;
  }
  return true;
}

Remedy DefaultScope(const PodFailure& f, const api::TrainingJobSpec& spec) {
  if (f.type == ReplicaType::kEvaluator) return Remedy::kRestartPod;
  if (api::EffectiveStrategy(spec) == api::Strategy::kParameterServer) {
    return f.type == ReplicaType::kWorker ? Remedy::kRestartPod : Remedy::kRestartGroup;
  }
  if (api::EffectiveRecovery(spec) == api::Recovery::kInPlace) return Remedy::kRestartPod;
  return Remedy::kRestartGroup;
}

bool Retryable(const PodFailure& f, api::RestartPolicy policy) {
  switch (policy) {
    case api::RestartPolicy::kAlways:
    case api::RestartPolicy::kOnFailure:
      return true;
    case api::RestartPolicy::kNever:
      return false;
    case api::RestartPolicy::kExitCode:
      if (f.retryable) return *f.retryable;
      return f.exit_code.value_or(0) >= 128;
  }
  return false;
}

}  // namespace

int32_t FailureCount(const ObservedPod& pod) {
  int32_t n = pod.phase == PodPhase::kFailed ? 1 : 0;
  return n + pod.restarts;
}

PodFailure DescribeFailure(const ObservedPod& pod, ReplicaType type, int32_t index) {
  PodFailure f;
  f.pod_name = pod.metadata.name();
  f.pod_uid = pod.metadata.uid();
  f.type = type;
  f.index = index;
  f.restarted_in_place = pod.phase != PodPhase::kFailed;
  const PodDetail& why = pod.why();
  f.disruption = IsDisruptionReason(why.reason) || pod.disruption_target;

  std::string container_reason;
  std::string termination;
  if (why.failure) {
    f.exit_code = why.failure->exit_code;
    container_reason = why.failure->reason;
    termination = why.failure->message;
  }
  // The trainer's termination message is JSON; anything else is kept as plain text.
  nlohmann::json msg = nlohmann::json::parse(termination, nullptr, false);
  if (msg.is_object()) {
    if (msg.contains("reason") && msg["reason"].is_string()) f.reason = msg["reason"];
    if (msg.contains("message") && msg["message"].is_string()) f.message = msg["message"];
    if (msg.contains("retryable") && msg["retryable"].is_boolean()) f.retryable = msg["retryable"];
  } else if (!termination.empty()) {
    f.message = termination.substr(0, 512);
  }
  if (f.reason.empty()) {
    if (f.disruption && !why.reason.empty()) {
      f.reason = why.reason;
    } else if (f.disruption) {
      f.reason = "DisruptionTarget";
    } else if (!container_reason.empty()) {
      f.reason = container_reason;
    } else {
      f.reason = why.reason;
    }
  }
  if (f.message.empty()) f.message = why.message;
  return f;
}

FailureDecision DecideFailure(const PodFailure& f, const api::TrainingJobSpec& spec) {
  if (spec.failure_policy) {
    const std::vector<api::FailureRule>& rules = spec.failure_policy->rules;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (!RuleMatches(rules[i], f)) continue;
      std::string source = StrCat("failurePolicy.rules[", i, "]");
      switch (rules[i].action) {
        case api::FailureAction::kFailJob:
          return {Remedy::kFailJob, true, source};
        case api::FailureAction::kRestartJob:
          return {Remedy::kRestartGroup, true, source};
        case api::FailureAction::kRestartPod:
          return {Remedy::kRestartPod, true, source};
        case api::FailureAction::kIgnore:
          return {DefaultScope(f, spec), false, source};
      }
    }
  }
  if (f.disruption) return {DefaultScope(f, spec), false, "default (disruption)"};
  const api::ReplicaSpec* rs = SpecOf(spec, f.type);
  api::RestartPolicy policy = rs != nullptr ? rs->restart_policy : api::kDefaultRestartPolicy;
  bool retryable = Retryable(f, policy);
  if (f.type == ReplicaType::kEvaluator) {
    return {retryable ? Remedy::kRestartPod : Remedy::kLeaveFailed, true, "default (evaluator)"};
  }
  if (!retryable) return {Remedy::kFailJob, true, "default (permanent failure)"};
  return {DefaultScope(f, spec), true, "default"};
}

std::string FailureReason(const PodFailure& f) {
  std::string_view type = api::NameOf<ReplicaType>(api::kReplicaTypeNames, f.type);
  if (f.disruption) return StrCat(type, f.reason.empty() ? "Disrupted" : f.reason);
  if (f.exit_code && *f.exit_code != 0) return StrCat(type, "ExitedWithCode", *f.exit_code);
  if (!f.reason.empty()) return StrCat(type, f.reason);
  return StrCat(type, "Failed");
}

std::string FailureMessage(const PodFailure& f) {
  std::string out = StrCat(api::NameOf<ReplicaType>(api::kReplicaTypeNames, f.type), " ", f.index,
                           " (pod ", f.pod_name, ")");
  if (f.disruption) {
    out = StrCat(out, " was disrupted");
  } else if (f.exit_code && *f.exit_code != 0) {
    out = StrCat(out, " exited with code ", *f.exit_code);
  } else {
    out = StrCat(out, " failed");
  }
  if (!f.reason.empty() || !f.message.empty()) {
    out = StrCat(out, " (", f.reason, f.reason.empty() || f.message.empty() ? "" : ": ", f.message,
                 ")");
  }
  return out;
}

}  // namespace lockstep::trainingjob
