#include "operator/api/job_state.h"

#include "common/str_util.h"
#include "operator/api/conditions.h"

namespace lockstep::api {
namespace {

std::string_view Name(JobState s) { return NameOf<JobState>(kJobStateNames, s); }

}  // namespace

bool IsTransitionAllowed(JobState from, JobState to) {
  if (from == to) return true;
  for (const StateTransition& t : kTransitions) {
    if (t.from == from && t.to == to) return true;
  }
  return false;
}

bool IsTerminal(JobState s) { return s == JobState::kSucceeded || s == JobState::kFailed; }

JobState StateOf(const std::vector<Condition>& conditions) {
  static constexpr std::pair<ConditionType, JobState> kPrecedence[] = {
      {ConditionType::kFailed, JobState::kFailed},
      {ConditionType::kSucceeded, JobState::kSucceeded},
      {ConditionType::kSuspended, JobState::kSuspended},
      {ConditionType::kRestarting, JobState::kRestarting},
      {ConditionType::kRunning, JobState::kRunning},
      {ConditionType::kCreated, JobState::kCreated},
  };
  for (const auto& [type, state] : kPrecedence) {
    if (IsConditionTrue(conditions, type)) return state;
  }
  return JobState::kPending;
}

absl::Status TransitionTo(TrainingJobStatus* status, JobState to, std::string reason,
                          std::string message, int64_t observed_generation, absl::Time now) {
  const JobState from = StateOf(status->conditions);
  if (!IsTransitionAllowed(from, to)) {
    return absl::FailedPreconditionError(
        StrCat("TrainingJob state ", Name(from), " cannot move to ", Name(to)));
  }
  for (const StateConditions& row : kStateConditions) {
    if (row.state != to) continue;
    for (size_t i = 0; i < row.set_false_count; ++i) {
      if (FindCondition(status->conditions, row.set_false[i]) != nullptr) {
        SetCondition(&status->conditions, row.set_false[i], ConditionStatus::kFalse, reason,
                     message, observed_generation, now);
      }
    }
    SetCondition(&status->conditions, row.set_true, ConditionStatus::kTrue, std::move(reason),
                 std::move(message), observed_generation, now);
  }
  status->state = StateOf(status->conditions);
  return absl::OkStatus();
}

absl::Status SetStalled(TrainingJobStatus* status, bool stalled, std::string reason,
                        std::string message, int64_t observed_generation, absl::Time now) {
  const JobState state = StateOf(status->conditions);
  if (!stalled) {
    if (FindCondition(status->conditions, ConditionType::kStalled) != nullptr) {
      SetCondition(&status->conditions, ConditionType::kStalled, ConditionStatus::kFalse,
                   std::move(reason), std::move(message), observed_generation, now);
    }
    return absl::OkStatus();
  }
  if (state != JobState::kCreated && state != JobState::kRunning &&
      state != JobState::kRestarting) {
    return absl::FailedPreconditionError(
        StrCat("a ", Name(state), " TrainingJob cannot be Stalled"));
  }
  SetCondition(&status->conditions, ConditionType::kStalled, ConditionStatus::kTrue,
               std::move(reason), std::move(message), observed_generation, now);
  return absl::OkStatus();
}

void SetSpecRefused(TrainingJobStatus* status, bool refused, std::string reason,
                    std::string message, int64_t observed_generation, absl::Time now) {
  if (!refused && FindCondition(status->conditions, ConditionType::kSpecRefused) == nullptr) {
    return;
  }
  SetCondition(&status->conditions, ConditionType::kSpecRefused,
               refused ? ConditionStatus::kTrue : ConditionStatus::kFalse, std::move(reason),
               std::move(message), observed_generation, now);
}

}  // namespace lockstep::api
