#pragma once
// The TrainingJob state machine, written down as data.
//
// A job's state is derived from its conditions (StateOf). kTransitions lists every allowed move
// between two different states; a move to the state the job is already in is always allowed and
// only refreshes reason and message. kStateConditions says, for each state, which condition
// the move sets True and which of the others, when present, it sets False: so Running and
// Restarting exclude each other, and Succeeded and Failed are terminal (no row leaves them).
// Stalled is orthogonal to the state: it may be True only while Created, Running or Restarting,
// and every move to another state clears it.
// Thread-safety: pure functions over values.

#include <array>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "operator/api/trainingjob_types.h"

namespace lockstep::api {

struct StateTransition {
  JobState from;
  JobState to;
  std::string_view when;  // what causes it
};

inline constexpr std::array<StateTransition, 18> kTransitions{{
    {JobState::kPending, JobState::kCreated, "the job was accepted; pods and services are created"},
    {JobState::kPending, JobState::kSuspended, "the job was created with runPolicy.suspend"},
    {JobState::kPending, JobState::kFailed, "the spec is invalid"},
    {JobState::kCreated, JobState::kRunning, "every pod of the attempt is running"},
    {JobState::kCreated, JobState::kRestarting, "a pod failed retryably before all ran"},
    {JobState::kCreated, JobState::kSucceeded, "the success policy was met before all ran"},
    {JobState::kCreated, JobState::kFailed, "permanent failure, backoff or deadline exhausted"},
    {JobState::kCreated, JobState::kSuspended, "runPolicy.suspend was set"},
    {JobState::kRunning, JobState::kRestarting, "a retryable failure restarts a pod or the group"},
    {JobState::kRunning, JobState::kSucceeded, "the success policy was met"},
    {JobState::kRunning, JobState::kFailed, "permanent failure, backoff or deadline exhausted"},
    {JobState::kRunning, JobState::kSuspended, "runPolicy.suspend was set"},
    {JobState::kRestarting, JobState::kRunning, "the restarted pods are running again"},
    {JobState::kRestarting, JobState::kSucceeded, "the success policy was met while restarting"},
    {JobState::kRestarting, JobState::kFailed, "permanent failure, backoff or deadline exhausted"},
    {JobState::kRestarting, JobState::kSuspended, "runPolicy.suspend was set"},
    {JobState::kSuspended, JobState::kCreated, "resumed: pods and services are created again"},
    {JobState::kSuspended, JobState::kFailed, "the spec became invalid or the deadline passed"},
}};

struct StateConditions {
  JobState state;
  ConditionType set_true;
  std::array<ConditionType, 4> set_false;  // applied only to conditions already present
  size_t set_false_count;
};

inline constexpr std::array<StateConditions, 6> kStateConditions{{
    {JobState::kCreated, ConditionType::kCreated, {ConditionType::kSuspended}, 1},
    {JobState::kRunning,
     ConditionType::kRunning,
     {ConditionType::kRestarting, ConditionType::kSuspended},
     2},
    {JobState::kRestarting, ConditionType::kRestarting, {ConditionType::kRunning}, 1},
    {JobState::kSuspended,
     ConditionType::kSuspended,
     {ConditionType::kRunning, ConditionType::kRestarting, ConditionType::kStalled},
     3},
    {JobState::kSucceeded,
     ConditionType::kSucceeded,
     {ConditionType::kRunning, ConditionType::kRestarting, ConditionType::kSuspended,
      ConditionType::kStalled},
     4},
    {JobState::kFailed,
     ConditionType::kFailed,
     {ConditionType::kRunning, ConditionType::kRestarting, ConditionType::kSuspended,
      ConditionType::kStalled},
     4},
}};

bool IsTransitionAllowed(JobState from, JobState to);
bool IsTerminal(JobState s);

// The state the conditions describe: the first True one of Failed, Succeeded, Suspended,
// Restarting, Running, Created; Pending when none is True.
JobState StateOf(const std::vector<Condition>& conditions);

// Moves `status` to `to` (conditions and status.state) at `now`. FailedPrecondition, with
// `status` unchanged, when no row of kTransitions allows the move.
absl::Status TransitionTo(TrainingJobStatus* status, JobState to, std::string reason,
                          std::string message, int64_t observed_generation, absl::Time now);

// Sets or clears Stalled. Setting it is a FailedPrecondition outside Created, Running and
// Restarting; clearing it when absent does nothing.
absl::Status SetStalled(TrainingJobStatus* status, bool stalled, std::string reason,
                        std::string message, int64_t observed_generation, absl::Time now);

// Sets or clears SpecRefused, in any state (orthogonal, as Stalled; kept once the job ends: the
// spec still says what the job did not run with). Clearing it when absent does nothing.
void SetSpecRefused(TrainingJobStatus* status, bool refused, std::string reason,
                    std::string message, int64_t observed_generation, absl::Time now);

}  // namespace lockstep::api
