#include "operator/api/job_state.h"

#include <gtest/gtest.h>

#include "operator/api/conditions.h"

namespace lockstep::api {
namespace {

using S = JobState;
constexpr S kAll[] = {S::kPending,   S::kCreated,   S::kRunning, S::kRestarting,
                      S::kSuspended, S::kSucceeded, S::kFailed};

std::string Name(S s) { return std::string(NameOf<JobState>(kJobStateNames, s)); }

// A status brought into `s` along allowed moves, one second apart.
TrainingJobStatus StatusIn(S s) {
  std::vector<S> path;
  switch (s) {
    case S::kPending:
      break;
    case S::kCreated:
      path = {S::kCreated};
      break;
    case S::kRunning:
      path = {S::kCreated, S::kRunning};
      break;
    case S::kRestarting:
      path = {S::kCreated, S::kRunning, S::kRestarting};
      break;
    case S::kSuspended:
    case S::kSucceeded:
    case S::kFailed:
      path = {S::kCreated, S::kRunning, s};
      break;
  }
  TrainingJobStatus status;
  int64_t t = 100;
  for (S step : path) {
    EXPECT_TRUE(TransitionTo(&status, step, "Setup", "", 1, absl::FromUnixSeconds(t++)).ok());
  }
  EXPECT_EQ(StateOf(status.conditions), s);
  return status;
}

// The expected transition matrix, written out independently of kTransitions:
// rows are `from`, columns are `to`, in kAll order. Self-moves are always allowed.
constexpr bool kExpected[7][7] = {
    //  Pend Crea Run  Rest Susp Succ Fail
    {1, 1, 0, 0, 1, 0, 1},  // Pending
    {0, 1, 1, 1, 1, 1, 1},  // Created
    {0, 0, 1, 1, 1, 1, 1},  // Running
    {0, 0, 1, 1, 1, 1, 1},  // Restarting
    {0, 1, 0, 0, 1, 0, 1},  // Suspended
    {0, 0, 0, 0, 0, 1, 0},  // Succeeded
    {0, 0, 0, 0, 0, 0, 1},  // Failed
};

TEST(JobStateTest, TransitionMatrixMatchesTheTable) {
  for (int f = 0; f < 7; ++f) {
    for (int t = 0; t < 7; ++t) {
      EXPECT_EQ(IsTransitionAllowed(kAll[f], kAll[t]), kExpected[f][t])
          << Name(kAll[f]) << " -> " << Name(kAll[t]);
    }
  }
}

// Every row of kTransitions, applied to a status in `from`: the target condition becomes True
// (with the new time and reason), the row's excluded conditions that were present become False,
// and the rest are untouched.
TEST(JobStateTest, EveryRowSetsItsConditions) {
  const absl::Time now = absl::FromUnixSeconds(5000);
  for (const StateTransition& row : kTransitions) {
    SCOPED_TRACE(Name(row.from) + " -> " + Name(row.to));
    TrainingJobStatus before = StatusIn(row.from);
    TrainingJobStatus after = before;
    ASSERT_TRUE(TransitionTo(&after, row.to, "Why", "because", 2, now).ok());
    EXPECT_EQ(StateOf(after.conditions), row.to);
    EXPECT_EQ(after.state, row.to);
    const StateConditions* spec = nullptr;
    for (const StateConditions& s : kStateConditions) {
      if (s.state == row.to) spec = &s;
    }
    ASSERT_NE(spec, nullptr);
    const Condition* target = FindCondition(after.conditions, spec->set_true);
    ASSERT_NE(target, nullptr);
    EXPECT_EQ(target->status, ConditionStatus::kTrue);
    EXPECT_EQ(target->reason, "Why");
    EXPECT_EQ(target->observed_generation, 2);
    const Condition* old_target = FindCondition(before.conditions, spec->set_true);
    bool was_true = old_target != nullptr && old_target->status == ConditionStatus::kTrue;
    EXPECT_EQ(target->last_transition_time, was_true ? old_target->last_transition_time : now);
    for (const Condition& c : after.conditions) {
      if (c.type == spec->set_true) continue;
      const Condition* old = FindCondition(before.conditions, c.type);
      ASSERT_NE(old, nullptr) << "a move added an unrelated condition";
      bool excluded = false;
      for (size_t i = 0; i < spec->set_false_count; ++i) excluded |= spec->set_false[i] == c.type;
      if (excluded) {
        EXPECT_EQ(c.status, ConditionStatus::kFalse);
      } else {
        EXPECT_EQ(c, *old);
      }
    }
  }
}

TEST(JobStateTest, DisallowedMovesLeaveStatusUnchanged) {
  for (int f = 0; f < 7; ++f) {
    for (int t = 0; t < 7; ++t) {
      if (kExpected[f][t]) continue;
      TrainingJobStatus status = StatusIn(kAll[f]);
      TrainingJobStatus copy = status;
      absl::Status s = TransitionTo(&status, kAll[t], "X", "", 1, absl::FromUnixSeconds(9));
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition)
          << Name(kAll[f]) << " -> " << Name(kAll[t]);
      EXPECT_EQ(status, copy);
    }
  }
}

TEST(JobStateTest, RunningAndRestartingExcludeEachOther) {
  TrainingJobStatus s = StatusIn(S::kRunning);
  ASSERT_TRUE(
      TransitionTo(&s, S::kRestarting, "WorkerExitedWithCode137", "", 1, absl::FromUnixSeconds(7))
          .ok());
  EXPECT_FALSE(IsConditionTrue(s.conditions, ConditionType::kRunning));
  EXPECT_TRUE(IsConditionTrue(s.conditions, ConditionType::kRestarting));
  ASSERT_TRUE(TransitionTo(&s, S::kRunning, "Running", "", 1, absl::FromUnixSeconds(8)).ok());
  EXPECT_TRUE(IsConditionTrue(s.conditions, ConditionType::kRunning));
  EXPECT_FALSE(IsConditionTrue(s.conditions, ConditionType::kRestarting));
  EXPECT_TRUE(IsConditionTrue(s.conditions, ConditionType::kCreated));
}

TEST(JobStateTest, ResumeClearsSuspended) {
  TrainingJobStatus s = StatusIn(S::kSuspended);
  ASSERT_TRUE(TransitionTo(&s, S::kCreated, "Resumed", "", 1, absl::FromUnixSeconds(9)).ok());
  EXPECT_EQ(s.state, S::kCreated);
  EXPECT_FALSE(IsConditionTrue(s.conditions, ConditionType::kSuspended));
  EXPECT_EQ(FindCondition(s.conditions, ConditionType::kSuspended)->reason, "Resumed");
}

TEST(JobStateTest, StalledOnlyWhileActiveAndClearedByTerminalStates) {
  for (S state : kAll) {
    TrainingJobStatus s = StatusIn(state);
    bool active = state == S::kCreated || state == S::kRunning || state == S::kRestarting;
    absl::Status st =
        SetStalled(&s, true, "PodPending", "pod p pending 600s", 1, absl::FromUnixSeconds(9));
    EXPECT_EQ(st.ok(), active) << Name(state);
    EXPECT_EQ(IsConditionTrue(s.conditions, ConditionType::kStalled), active);
  }
  TrainingJobStatus s = StatusIn(S::kRunning);
  ASSERT_TRUE(SetStalled(&s, true, "NoProgress", "", 1, absl::FromUnixSeconds(9)).ok());
  EXPECT_EQ(StateOf(s.conditions), S::kRunning);  // Stalled does not change the state
  ASSERT_TRUE(
      TransitionTo(&s, S::kFailed, "DeadlineExceeded", "", 1, absl::FromUnixSeconds(10)).ok());
  EXPECT_FALSE(IsConditionTrue(s.conditions, ConditionType::kStalled));
  // Clearing a Stalled that was never set adds nothing.
  TrainingJobStatus fresh = StatusIn(S::kRunning);
  ASSERT_TRUE(SetStalled(&fresh, false, "Progressing", "", 1, absl::FromUnixSeconds(9)).ok());
  EXPECT_EQ(FindCondition(fresh.conditions, ConditionType::kStalled), nullptr);
}

TEST(JobStateTest, TerminalStates) {
  for (S state : kAll) EXPECT_EQ(IsTerminal(state), state == S::kSucceeded || state == S::kFailed);
}

}  // namespace
}  // namespace lockstep::api
