// Table tests of the planner: every row of the state transition table, every restart rule.
#include "operator/trainingjob/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "operator/api/conditions.h"
#include "operator/api/job_state.h"
#include "operator/api/validation.h"
#include "operator/trainingjob/testing.h"

namespace lockstep::trainingjob {
namespace {

using api::JobState;
using api::ReplicaType;
using nlohmann::json;
using testing::Exited;
using ::testing::HasSubstr;
using testing::Job;
using testing::kT0;
using testing::MakePod;
using testing::RestartedInPlace;
using testing::WithUid;

// The world the planner sees: a job, its pods, and whether its services and secret exist.
struct World {
  api::TrainingJob job;
  std::vector<ObservedPod> pods;
  bool services = true;
  bool secret = true;
  bool pod_group = false;                // in the PodGroup informer's cache
  std::vector<ChildRef> extra_services;  // beyond one per replica of the spec
  std::optional<api::Progress> progress;
  std::map<std::string, std::string> mount_failures;
  absl::Time now = kT0 + absl::Seconds(10);
  PlannerOptions options;

  Plan Step() {
    Observed o;
    o.job = job;
    for (const ObservedPod& p : pods) o.pods.push_back(testing::Share(p));
    if (services) {
      for (const auto& [type, spec] : job.spec.replica_specs) {
        for (int i = 0; i < spec.replicas; ++i) {
          std::string name = api::ReplicaName(job.metadata.name, type, i);
          o.services.push_back({name, name + "-svc", type, i, false});
        }
      }
    }
    for (const ChildRef& s : extra_services) o.services.push_back(s);
    o.token_secret_exists = secret;
    o.pod_group_exists = pod_group;
    o.progress = progress;
    o.mount_failures = mount_failures;
    o.now = now;
    Plan plan = MakePlan(o, options);
    job.status = plan.status;  // what the reconciler writes
    return plan;
  }

  // Moves `job` into `state` through the planner (as the controller would get there).
  void SetState(JobState s) {
    api::TrainingJobStatus st = job.status.value_or(api::TrainingJobStatus{});
    st.start_time = kT0;
    if (s != JobState::kPending) {
      ASSERT_TRUE(api::TransitionTo(&st, JobState::kCreated, "Created", "", 1, kT0).ok());
    }
    if (s == JobState::kRestarting) {
      ASSERT_TRUE(api::TransitionTo(&st, JobState::kRestarting, "R", "", 1, kT0).ok());
    } else if (s != JobState::kPending && s != JobState::kCreated) {
      ASSERT_TRUE(api::TransitionTo(&st, s, "S", "", 1, kT0).ok());
    }
    job.status = st;
  }

  JobState state() const { return job.status->state; }
  const api::Condition& Cond(api::ConditionType t) const {
    const api::Condition* c = api::FindCondition(job.status->conditions, t);
    EXPECT_NE(c, nullptr);
    static api::Condition none;
    return c != nullptr ? *c : none;
  }
};

std::vector<std::string> Names(const Plan& p, Action::Kind kind, ChildKind child) {
  std::vector<std::string> out;
  for (const Action& a : p.actions) {
    if (a.kind == kind && a.child == child) out.push_back(a.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}
std::vector<std::string> Created(const Plan& p) {
  return Names(p, Action::Kind::kCreate, ChildKind::kPod);
}
std::vector<std::string> Deleted(const Plan& p) {
  return Names(p, Action::Kind::kDelete, ChildKind::kPod);
}
using V = std::vector<std::string>;

World Mwm(int workers = 2, const std::string& policy = "ExitCode", json extra = json::object()) {
  return {.job = Job("MultiWorkerMirrored", {{"Worker", workers, policy}}, extra)};
}
// A MultiWorkerMirrored job that restarts its whole group on a lost worker.
World MwmGroupRestart(int workers = 2) {
  return Mwm(workers, "ExitCode", {{"runPolicy", {{"recovery", "RestartGroup"}}}});
}
void AllRunning(World& w, int attempt = 0) {
  w.pods.clear();
  for (const auto& [type, spec] : w.job.spec.replica_specs) {
    for (int i = 0; i < spec.replicas; ++i)
      w.pods.push_back(MakePod(w.job, type, i, attempt, PodPhase::kRunning));
  }
}

// ---- the transition table, row by row ----

struct Row {
  JobState from;
  JobState to;
  std::string reason;  // expected reason of the new state's condition (prefix)
  std::function<void(World&)> setup;
};

std::vector<Row> Rows() {
  return {
      {JobState::kPending, JobState::kCreated, "Created", [](World&) {}},
      {JobState::kPending, JobState::kSuspended, "Suspended",
       [](World& w) { w.job.spec.run_policy.suspend = true; }},
      {JobState::kPending, JobState::kFailed, "InvalidSpec",
       [](World& w) { w.job.spec.replica_specs[ReplicaType::kPS].replicas = 1; }},
      {JobState::kCreated, JobState::kRunning, "AllReplicasRunning",
       [](World& w) { AllRunning(w); }},
      {JobState::kCreated, JobState::kRestarting, "WorkerExitedWithCode137",
       [](World& w) {
         w.pods = {MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kPending),
                   Exited(MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kRunning), 137)};
       }},
      {JobState::kCreated, JobState::kSucceeded, "Worker0Succeeded",
       [](World& w) {
         w.pods = {MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kSucceeded),
                   MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kPending)};
       }},
      {JobState::kCreated, JobState::kFailed, "WorkerExitedWithCode2",
       [](World& w) {
         w.pods = {Exited(MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kRunning), 2)};
       }},
      {JobState::kCreated, JobState::kSuspended, "Suspended",
       [](World& w) { w.job.spec.run_policy.suspend = true; }},
      {JobState::kRunning, JobState::kRestarting, "WorkerExitedWithCode143",
       [](World& w) {
         AllRunning(w);
         w.pods[1] = Exited(w.pods[1], 143);
       }},
      {JobState::kRunning, JobState::kSucceeded, "Worker0Succeeded",
       [](World& w) {
         AllRunning(w);
         w.pods[0] = MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kSucceeded);
       }},
      {JobState::kRunning, JobState::kFailed, "DeadlineExceeded",
       [](World& w) {
         AllRunning(w);
         w.job.spec.run_policy.active_deadline_seconds = 5;
       }},
      {JobState::kRunning, JobState::kSuspended, "Suspended",
       [](World& w) {
         AllRunning(w);
         w.job.spec.run_policy.suspend = true;
       }},
      {JobState::kRestarting, JobState::kRunning, "AllReplicasRunning",
       [](World& w) {
         w.job.status->attempt = 1;
         AllRunning(w, 1);
       }},
      {JobState::kRestarting, JobState::kSucceeded, "Worker0Succeeded",
       [](World& w) {
         w.pods = {MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kSucceeded)};
       }},
      {JobState::kRestarting, JobState::kFailed, "BackoffLimitExceeded",
       [](World& w) {
         w.job.spec.run_policy.backoff_limit = 1;
         w.job.status->restart_count = 1;
         w.pods = {Exited(MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kRunning), 137)};
       }},
      {JobState::kRestarting, JobState::kSuspended, "Suspended",
       [](World& w) { w.job.spec.run_policy.suspend = true; }},
      {JobState::kSuspended, JobState::kCreated, "Resumed", [](World&) {}},
      {JobState::kSuspended, JobState::kFailed, "InvalidSpec",
       [](World& w) { w.job.spec.replica_specs[ReplicaType::kPS].replicas = 1; }},
  };
}

TEST(PlannerTransitionTest, EveryRowOfTheTableHappens) {
  std::set<std::pair<JobState, JobState>> covered;
  for (const Row& row : Rows()) {
    World w = Mwm();
    w.SetState(row.from);
    if (row.from == JobState::kSuspended) w.job.spec.run_policy.suspend = false;
    row.setup(w);
    ASSERT_EQ(w.job.status->state, row.from);
    w.Step();
    std::string what = std::string(api::NameOf<JobState>(api::kJobStateNames, row.from)) + " -> " +
                       std::string(api::NameOf<JobState>(api::kJobStateNames, row.to));
    EXPECT_EQ(w.state(), row.to) << what;
    const api::Condition* c = nullptr;
    for (const api::Condition& cond : w.job.status->conditions) {
      if (cond.status == api::ConditionStatus::kTrue && api::StateOf({cond}) == row.to) {
        c = &cond;
      }
    }
    ASSERT_NE(c, nullptr) << what;
    EXPECT_THAT(c->reason, ::testing::StartsWith(row.reason)) << what;
    covered.insert({row.from, row.to});
  }
  for (const api::StateTransition& t : api::kTransitions) {
    EXPECT_TRUE(covered.contains({t.from, t.to}))
        << "no test row for " << api::NameOf<JobState>(api::kJobStateNames, t.from) << " -> "
        << api::NameOf<JobState>(api::kJobStateNames, t.to);
  }
}

// ---- desired state ----

TEST(PlannerTest, NewJobCreatesSecretServicesAndPods) {
  World w = Mwm();
  w.services = false;
  w.secret = false;
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kCreated);
  EXPECT_EQ(Created(p), (V{"t-worker-0", "t-worker-1"}));
  EXPECT_EQ(Names(p, Action::Kind::kCreate, ChildKind::kService), (V{"t-worker-0", "t-worker-1"}));
  EXPECT_EQ(Names(p, Action::Kind::kCreateTokenSecret, ChildKind::kSecret), (V{"t-token"}));
  EXPECT_EQ(w.job.status->start_time, w.now);
  EXPECT_EQ(w.job.status->replica_statuses[ReplicaType::kWorker].selector,
            "lockstep.io/job-name=t,lockstep.io/replica-type=worker");
  EXPECT_EQ(w.job.status->ready, "0/2");
  EXPECT_EQ(w.job.status->observed_generation, 1);
}

TEST(PlannerTest, NothingToDoLeavesStatusUntouched) {
  World w = Mwm();
  AllRunning(w);
  w.Step();
  api::TrainingJobStatus before = *w.job.status;
  w.now += absl::Seconds(30);
  Plan p = w.Step();
  EXPECT_TRUE(p.actions.empty());
  EXPECT_EQ(p.status, before);  // not even lastReconcileTime moves: no write
  EXPECT_EQ(w.job.status->ready, "2/2");
}

TEST(PlannerTest, GangSchedulingCreatesPodGroup) {
  World w = Mwm();
  w.options.desired.gang = GangScheduler::kVolcano;
  Plan p = w.Step();
  EXPECT_EQ(Names(p, Action::Kind::kCreate, ChildKind::kPodGroup), (V{"t"}));
  for (const Action& a : p.actions) {
    if (a.child == ChildKind::kPodGroup) {
      EXPECT_EQ(a.object["apiVersion"], "scheduling.volcano.sh/v1beta1");
    }
  }

  // Observed (not remembered): once the informer has it, it is not created again; when it
  // goes, it is created again.
  w.pod_group = true;
  EXPECT_TRUE(Names(w.Step(), Action::Kind::kCreate, ChildKind::kPodGroup).empty());
  w.pod_group = false;
  EXPECT_EQ(Names(w.Step(), Action::Kind::kCreate, ChildKind::kPodGroup), (V{"t"}));

  // Without gang scheduling no PodGroup is planned.
  World plain = Mwm();
  EXPECT_TRUE(Names(plain.Step(), Action::Kind::kCreate, ChildKind::kPodGroup).empty());
}

TEST(PlannerTest, SurplusPodsAndServicesBeyondTheCountAreDeleted) {
  World w = Mwm(2);
  AllRunning(w);
  w.pods.push_back(MakePod(w.job, ReplicaType::kWorker, 2, 0, PodPhase::kRunning));
  w.extra_services = {{"t-worker-2", "svc-2", ReplicaType::kWorker, 2, false}};
  Plan p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-worker-2"}));
  EXPECT_EQ(Names(p, Action::Kind::kDelete, ChildKind::kService), (V{"t-worker-2"}));
  EXPECT_TRUE(Created(p).empty());
}

// Issue 42's finding: on a server without the CRD's CEL rule, a replica count changed while a
// job that is not elastic runs made a worker whose TF_CONFIG the group did not list, which
// failed the job. The operator holds the counts the job started with: SpecRefused True with
// an essential ScaleRefused event, no pod created or deleted; cleared when the spec agrees
// again; a suspended job takes the new count.
TEST(PlannerTest, AReplicaCountChangedWhileRunningIsHeldWithAConditionAndAnEvent) {
  World w = Mwm(3);
  AllRunning(w);
  w.Step();
  EXPECT_EQ(w.job.status->replica_counts, (std::map<std::string, int32_t>{{"Worker", 3}}));
  for (int n : {2, 4}) {
    w.job.spec.replica_specs[ReplicaType::kWorker].replicas = n;
    Plan p = w.Step();
    EXPECT_TRUE(Deleted(p).empty()) << n;
    EXPECT_TRUE(Created(p).empty()) << n;
    EXPECT_EQ(w.state(), JobState::kRunning);
    EXPECT_TRUE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kSpecRefused));
    EXPECT_THAT(w.Cond(api::ConditionType::kSpecRefused).message,
                HasSubstr("Worker 3 -> " + std::to_string(n) + " refused"));
    ASSERT_EQ(p.events.size(), 1u);
    EXPECT_EQ(p.events[0].reason, "ScaleRefused");
    EXPECT_TRUE(p.events[0].essential);
    EXPECT_TRUE(w.Step().events.empty());  // said once
  }
  w.job.spec.replica_specs[ReplicaType::kWorker].replicas = 3;
  w.Step();
  EXPECT_FALSE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kSpecRefused));
  // Suspended, the job may be resized; resumed, it runs at the new count.
  w.job.spec.run_policy.suspend = true;
  w.Step();
  w.pods.clear();
  w.job.spec.replica_specs[ReplicaType::kWorker].replicas = 2;
  w.Step();
  w.job.spec.run_policy.suspend = false;
  Plan p = w.Step();
  EXPECT_EQ(Created(p), (V{"t-worker-0", "t-worker-1"}));
  EXPECT_EQ(w.job.status->replica_counts, (std::map<std::string, int32_t>{{"Worker", 2}}));
  EXPECT_FALSE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kSpecRefused));
}

TEST(PlannerTest, TerminatingPodBlocksItsReplacement) {
  World w = Mwm();
  AllRunning(w);
  w.pods[1].metadata.deletion_timestamp = kT0;
  Plan p = w.Step();
  EXPECT_TRUE(Created(p).empty());
}

// ---- restarts ----

TEST(PlannerRestartTest, RetryableWorkerFailureRestartsTheGroup) {
  World w = MwmGroupRestart();
  AllRunning(w);
  w.Step();
  w.pods[1] = Exited(w.pods[1], 137);
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kRestarting);
  EXPECT_EQ(w.job.status->attempt, 1);
  EXPECT_EQ(w.job.status->restart_count, 1);
  EXPECT_EQ(Deleted(p), (V{"t-worker-0", "t-worker-1"}));
  EXPECT_THAT(w.Cond(api::ConditionType::kRestarting).message,
              HasSubstr("Worker 1 (pod t-worker-1) exited with code 137"));
  // Pods are gone; the new attempt is created with attempt 1.
  w.pods.clear();
  p = w.Step();
  ASSERT_EQ(Created(p), (V{"t-worker-0", "t-worker-1"}));
  EXPECT_EQ(p.actions.back().object["metadata"]["labels"]["lockstep.io/attempt"], "1");
  AllRunning(w, 1);
  w.Step();
  EXPECT_EQ(w.state(), JobState::kRunning);
  EXPECT_EQ(w.job.status->restart_count, 1);
}

TEST(PlannerRestartTest, RepeatedReconcileDoesNotCountTwice) {
  World w = MwmGroupRestart();
  AllRunning(w);
  w.Step();
  w.pods[1] = Exited(w.pods[1], 137);
  api::TrainingJob before = w.job;
  w.Step();
  w.job = before;  // the status write was lost: the same observation again
  w.Step();
  EXPECT_EQ(w.job.status->restart_count, 1);
  w.Step();  // and with the status written: the old attempt's failure is not new
  EXPECT_EQ(w.job.status->restart_count, 1);
  EXPECT_EQ(w.job.status->attempt, 1);
}

TEST(PlannerRestartTest, PermanentFailureFailsWithTheCulprit) {
  World w = Mwm();
  AllRunning(w);
  w.Step();
  w.pods[0] =
      Exited(w.pods[0], 3, R"({"reason":"BadConfig","message":"--epochs must be positive"})");
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kFailed);
  const api::Condition& c = w.Cond(api::ConditionType::kFailed);
  EXPECT_EQ(c.reason, "WorkerExitedWithCode3");
  EXPECT_THAT(c.message, HasSubstr("t-worker-0"));
  EXPECT_THAT(c.message, HasSubstr("BadConfig: --epochs must be positive"));
  EXPECT_EQ(Deleted(p), (V{"t-worker-1"}));  // cleanPodPolicy Running
  EXPECT_TRUE(w.job.status->completion_time.has_value());
}

TEST(PlannerRestartTest, BackoffLimitCountsKubeletRestartsUnderOnFailure) {
  World w = {.job = Job("ParameterServer", {{"PS", 1}, {"Worker", 2}},
                        {{"runPolicy", {{"backoffLimit", 3}}}})};
  AllRunning(w);
  w.Step();
  // Worker 1 restarted in place twice: PS strategy restarts workers alone; both count.
  w.pods[2] = RestartedInPlace(w.pods[2], 1, 2);
  Plan p = w.Step();
  EXPECT_EQ(w.job.status->restart_count, 2);
  EXPECT_EQ(w.job.status->attempt, 0);
  EXPECT_TRUE(Deleted(p).empty());
  EXPECT_EQ(w.job.status->replica_statuses[ReplicaType::kWorker].restarts, 2);
  w.pods[2] = RestartedInPlace(w.pods[2], 1, 1);
  p = w.Step();
  EXPECT_EQ(w.job.status->restart_count, 3);
  // The container already runs again, so the job passes through Restarting back to Running.
  EXPECT_EQ(p.events.front().reason, "WorkerExitedWithCode1");
  EXPECT_EQ(w.state(), JobState::kRunning);
  w.pods[1] = RestartedInPlace(w.pods[1], 137, 1);
  p = w.Step();
  EXPECT_EQ(w.state(), JobState::kFailed);
  EXPECT_EQ(w.Cond(api::ConditionType::kFailed).reason, "BackoffLimitExceeded");
  EXPECT_THAT(w.Cond(api::ConditionType::kFailed).message, HasSubstr("backoffLimit 3"));
  // The terminal reason is essential: the recorder writes it past its spam filter.
  ASSERT_FALSE(p.events.empty());
  EXPECT_EQ(p.events.back().reason, "BackoffLimitExceeded");
  EXPECT_TRUE(p.events.back().essential);
}

TEST(PlannerRestartTest, ParameterServerWorkerRestartsAloneWithoutNewAttempt) {
  World w = {.job = Job("ParameterServer", {{"PS", 1}, {"Worker", 2, "ExitCode"}})};
  AllRunning(w);
  w.Step();
  w.pods[1] = Exited(w.pods[1], 137);  // worker 0
  Plan p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-worker-0"}));
  EXPECT_EQ(w.job.status->attempt, 0);
  EXPECT_EQ(w.job.status->restart_count, 1);
}

TEST(PlannerRestartTest, PsFailureRestartsGroupIncludingPs) {
  World w = {.job = Job("ParameterServer", {{"PS", 1, "ExitCode"}, {"Worker", 2}})};
  AllRunning(w);
  w.Step();
  w.pods[0] = Exited(w.pods[0], 137);
  Plan p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-ps-0", "t-worker-0", "t-worker-1"}));
  EXPECT_EQ(w.job.status->attempt, 1);
}

TEST(PlannerRestartTest, EvaluatorFailuresAreIsolated) {
  World w = {.job = Job("ParameterServer", {{"PS", 1}, {"Worker", 1}, {"Evaluator", 1, "ExitCode"}},
                        {{"runPolicy", {{"backoffLimit", 0}}}})};
  AllRunning(w);
  w.Step();
  // pods: evaluator, ps, worker (map order)
  w.pods[0] = Exited(w.pods[0], 137);
  Plan p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-evaluator-0"}));
  EXPECT_EQ(w.job.status->restart_count, 0);  // never spends the job's budget
  EXPECT_EQ(w.job.status->replica_statuses[ReplicaType::kEvaluator].restarts, 1);
  EXPECT_NE(w.state(), JobState::kFailed);
  // A permanent evaluator failure leaves it failed; the job goes on.
  w.pods[0] = Exited(MakePod(w.job, ReplicaType::kEvaluator, 0, 0, PodPhase::kRunning), 2);
  w.pods[0] = WithUid(w.pods[0], "eval-2");
  p = w.Step();
  EXPECT_TRUE(Deleted(p).empty());
  EXPECT_TRUE(Created(p).empty());
  EXPECT_NE(w.state(), JobState::kFailed);
  EXPECT_EQ(p.events.back().reason, "EvaluatorExitedWithCode2");
}

TEST(PlannerRestartTest, DisruptionRestartsWithoutSpendingBudget) {
  World w =
      Mwm(2, "ExitCode", {{"runPolicy", {{"backoffLimit", 0}, {"recovery", "RestartGroup"}}}});
  AllRunning(w);
  w.Step();
  w.pods[0] = Exited(w.pods[0], 137);
  w.pods[0].mutable_detail().reason = "Evicted";
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kRestarting);
  EXPECT_EQ(w.job.status->restart_count, 0);
  EXPECT_EQ(w.job.status->attempt, 1);
  EXPECT_EQ(w.Cond(api::ConditionType::kRestarting).reason, "WorkerEvicted");
}

TEST(PlannerRestartTest, IgnoreRuleRestartsWithoutSpendingBudget) {
  World w = Mwm(2, "ExitCode",
                {{"runPolicy", {{"backoffLimit", 0}}},
                 {"failurePolicy",
                  json::parse(R"({"rules":[{"action":"Ignore","onReasons":["PeerLost"]}]})")}});
  AllRunning(w);
  w.Step();
  w.pods[0] = Exited(w.pods[0], 1, R"({"reason":"PeerLost"})");
  w.Step();
  EXPECT_EQ(w.state(), JobState::kRestarting);
  EXPECT_EQ(w.job.status->restart_count, 0);
}

TEST(PlannerRestartTest, OldAttemptFailuresAreCollateral) {
  World w = MwmGroupRestart();
  AllRunning(w);
  w.Step();
  w.pods[1] = Exited(w.pods[1], 137);
  w.Step();
  // Worker 0 of attempt 0 dies of PeerLost while it is being replaced.
  w.pods[0] = Exited(w.pods[0], 143);
  Plan p = w.Step();
  EXPECT_EQ(w.job.status->restart_count, 1);
  EXPECT_EQ(w.job.status->attempt, 1);
  EXPECT_EQ(Deleted(p), (V{"t-worker-0", "t-worker-1"}));
}

// ---- in-place recovery (MultiWorkerMirrored's default) ----

std::string EnvOf(const json& pod, const std::string& name) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return "<unset>";
}

// ---- elastic workers ----

World Elastic(int workers, int min, int max) {
  return {.job = Job("MultiWorkerMirrored",
                     {{"Chief", 1, "ExitCode"}, {"Worker", workers, "ExitCode"}},
                     {{"runPolicy", {{"elastic", {{"minReplicas", min}, {"maxReplicas", max}}}}}})};
}
void SetWorkers(World& w, int n) { w.job.spec.replica_specs[ReplicaType::kWorker].replicas = n; }
std::vector<std::string> EventReasons(const Plan& p) {
  std::vector<std::string> out;
  for (const PlannedEvent& e : p.events) out.push_back(e.reason);
  return out;
}
bool HasEvent(const Plan& p, const std::string& reason) {
  std::vector<std::string> r = EventReasons(p);
  return std::find(r.begin(), r.end(), reason) != r.end();
}

// `kubectl scale` within runPolicy.elastic: the added worker's pod is created (its TF_CONFIG
// lists the new count; the trainer may grow to the bound), the removed ones' pods are deleted,
// and the group is never restarted.
TEST(PlannerElasticTest, AScaleWithinTheBoundsAddsAndRemovesWorkersWithoutARestart) {
  World w = Elastic(2, 1, 4);
  AllRunning(w);
  w.Step();
  ASSERT_EQ(w.state(), JobState::kRunning);
  ASSERT_TRUE(w.job.status->elastic.has_value());
  EXPECT_EQ(w.job.status->elastic->workers, 2);
  SetWorkers(w, 3);
  Plan p = w.Step();
  ASSERT_EQ(Created(p), (V{"t-worker-2"}));
  EXPECT_TRUE(Deleted(p).empty());
  EXPECT_TRUE(HasEvent(p, "Resized")) << ::testing::PrintToString(EventReasons(p));
  const json& pod = p.actions.back().object;
  EXPECT_EQ(EnvOf(pod, "LOCKSTEP_ELASTIC_MAX_WORKERS"), "4");
  json tf = json::parse(EnvOf(pod, "TF_CONFIG"));
  EXPECT_EQ(tf["cluster"]["worker"].size(), 3u);
  EXPECT_EQ(w.job.status->elastic->workers, 3);
  w.pods.push_back(MakePod(w.job, ReplicaType::kWorker, 2, 0, PodPhase::kRunning));
  w.Step();
  SetWorkers(w, 1);
  p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-worker-1", "t-worker-2"}));  // the highest indices
  EXPECT_TRUE(Created(p).empty());
  EXPECT_EQ(w.state(), JobState::kRunning);
  EXPECT_EQ(w.job.status->attempt, 0);
  EXPECT_EQ(w.job.status->restart_count, 0);
}

// A count outside the bounds (an API server without CEL let it through), or one whose group
// would not divide the global batch the chief reports, is refused once with an event and
// recorded in status.elastic; the job stays at the count it runs at.
TEST(PlannerElasticTest, ACountOutsideTheBoundsOrNotDividingTheGlobalBatchIsRefused) {
  World w = Elastic(2, 1, 3);
  AllRunning(w);
  w.Step();
  SetWorkers(w, 5);
  Plan p = w.Step();
  EXPECT_TRUE(Created(p).empty());
  EXPECT_TRUE(HasEvent(p, "ResizeRefused"));
  EXPECT_EQ(w.job.status->elastic->workers, 2);
  EXPECT_THAT(w.job.status->elastic->refused,
              HasSubstr("Worker replicas 5 lies outside runPolicy.elastic (1 to 3); the job "
                        "stays at 2 workers"));
  p = w.Step();
  EXPECT_FALSE(HasEvent(p, "ResizeRefused"));  // once per request
  EXPECT_TRUE(Created(p).empty());
  EXPECT_TRUE(Deleted(p).empty());

  w.progress = api::Progress{.step = 10, .global_batch = 90};
  SetWorkers(w, 3);  // 1 chief + 3 workers: 4 replicas do not divide 90
  p = w.Step();
  EXPECT_TRUE(Created(p).empty());
  EXPECT_TRUE(HasEvent(p, "ResizeRefused"));
  EXPECT_THAT(w.job.status->elastic->refused,
              HasSubstr("the global batch 90 does not divide over 4 replicas (1 chief and 3 "
                        "workers); the job stays at 2 workers"));
  SetWorkers(w, 1);  // 2 replicas divide it
  p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-worker-1"}));
  EXPECT_EQ(w.job.status->elastic->refused, "");
  EXPECT_EQ(w.job.status->elastic->workers, 1);
}

TEST(PlannerInPlaceTest, ALostWorkerIsReplacedAloneAsItsNextIncarnation) {
  World w = Mwm(3);
  AllRunning(w);
  w.Step();
  w.pods[2] = Exited(w.pods[2], 137);
  Plan p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-worker-2"}));  // the others keep running, and their state
  EXPECT_EQ(w.state(), JobState::kRestarting);
  EXPECT_EQ(w.job.status->attempt, 0);
  EXPECT_EQ(w.job.status->restart_count, 1);  // still spends the budget
  EXPECT_THAT(w.Cond(api::ConditionType::kRestarting).message,
              HasSubstr("restarting the pod alone: the other replicas keep their state"));
  w.pods.pop_back();
  p = w.Step();
  ASSERT_EQ(Created(p), (V{"t-worker-2"}));
  const json& pod = p.actions.back().object;
  EXPECT_EQ(pod["metadata"]["labels"]["lockstep.io/attempt"], "0");
  EXPECT_EQ(pod["metadata"]["labels"]["lockstep.io/incarnation"], "1");
  EXPECT_EQ(EnvOf(pod, "LOCKSTEP_INCARNATION"), "1");
  EXPECT_EQ(EnvOf(pod, "LOCKSTEP_RECOVERY"), "InPlace");
  EXPECT_EQ(p.actions.back().why, "attempt 0, incarnation 1");
  AllRunning(w);
  w.Step();
  EXPECT_EQ(w.state(), JobState::kRunning);
  // Lost again: the third incarnation.
  w.pods[2] = Exited(w.pods[2], 137);
  w.pods[2] = WithUid(w.pods[2], "second");
  w.Step();
  w.pods.pop_back();
  p = w.Step();
  ASSERT_EQ(Created(p), (V{"t-worker-2"}));
  EXPECT_EQ(p.actions.back().object["metadata"]["labels"]["lockstep.io/incarnation"], "2");
  EXPECT_EQ(w.job.status->restart_count, 2);
}

// The coordination service moves to the lowest surviving replica, so the replica hosting it
// (worker 0 without a chief, else the chief) is replaced alone like any other.
TEST(PlannerInPlaceTest, TheCoordinatorsHostIsReplacedAloneToo) {
  World w = Mwm(2);
  AllRunning(w);
  w.Step();
  w.pods[0] = Exited(w.pods[0], 137);
  Plan p = w.Step();
  EXPECT_EQ(Deleted(p), (V{"t-worker-0"}));
  EXPECT_EQ(w.job.status->attempt, 0);
  World c{.job = Job("MultiWorkerMirrored", {{"Chief", 1, "ExitCode"}, {"Worker", 2, "ExitCode"}})};
  AllRunning(c);
  c.Step();
  c.pods[0] = Exited(c.pods[0], 137);  // pods: chief 0, worker 0, worker 1
  p = c.Step();
  EXPECT_EQ(Deleted(p), (V{"t-chief-0"}));
  EXPECT_EQ(c.job.status->attempt, 0);
  EXPECT_EQ(c.job.status->restart_count, 1);
  EXPECT_THAT(c.Cond(api::ConditionType::kRestarting).message,
              HasSubstr("restarting the pod alone: the other replicas keep their state"));
  c.pods.erase(c.pods.begin());
  p = c.Step();
  ASSERT_EQ(Created(p), (V{"t-chief-0"}));
  EXPECT_EQ(p.actions.back().object["metadata"]["labels"]["lockstep.io/incarnation"], "1");
}

TEST(PlannerInPlaceTest, RestartJobRulesAndRestartGroupStillRestartTheGroup) {
  World rule = Mwm(3, "ExitCode",
                   {{"failurePolicy",
                     {{"rules",
                       {{{"action", "RestartJob"},
                         {"onExitCodes", {{"operator", "In"}, {"values", {137}}}}}}}}}});
  AllRunning(rule);
  rule.Step();
  rule.pods[2] = Exited(rule.pods[2], 137);
  EXPECT_EQ(Deleted(rule.Step()).size(), 3u);
  EXPECT_EQ(rule.job.status->attempt, 1);
  World group = MwmGroupRestart(3);
  AllRunning(group);
  group.Step();
  group.pods[2] = Exited(group.pods[2], 137);
  EXPECT_EQ(Deleted(group.Step()).size(), 3u);
  EXPECT_EQ(group.job.status->attempt, 1);
}

TEST(PlannerInPlaceTest, InPlaceRestartsSpendTheBackoffLimit) {
  World w = Mwm(3, "ExitCode", {{"runPolicy", {{"backoffLimit", 1}}}});
  AllRunning(w);
  w.Step();
  w.pods[1] = Exited(w.pods[1], 137);
  w.Step();
  EXPECT_EQ(w.job.status->restart_count, 1);
  AllRunning(w);
  w.pods[2] = Exited(w.pods[2], 137);
  w.Step();
  EXPECT_EQ(w.state(), JobState::kFailed);
  EXPECT_EQ(w.Cond(api::ConditionType::kFailed).reason, "BackoffLimitExceeded");
}

// The chief's recoveries land in status.recoveries (not status.progress), once each, with an
// event; the list keeps the last five.
TEST(PlannerInPlaceTest, ReportedRecoveriesAreRecordedOnceWithAnEvent) {
  World w = Mwm(3);
  AllRunning(w);
  w.Step();
  api::Progress progress{.step = 120};
  progress.recoveries.push_back({.epoch = 1,
                                 .replaced = "worker 2",
                                 .cause = "rank 2 (worker 2) was replaced",
                                 .rendezvous_seconds = 1.25,
                                 .state_transfer_seconds = 0.05,
                                 .recovery_seconds = 1.5,
                                 .resumed_step = 100});
  w.progress = progress;
  Plan p = w.Step();
  ASSERT_EQ(w.job.status->recoveries.size(), 1u);
  EXPECT_EQ(w.job.status->recoveries[0].replaced, "worker 2");
  EXPECT_EQ(w.job.status->recoveries[0].attempt, 0);
  EXPECT_TRUE(w.job.status->progress->recoveries.empty());
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].reason, "RecoveredInPlace");
  EXPECT_EQ(p.events[0].message,
            "worker 2 replaced (rank 2 (worker 2) was replaced); training again at step 100 1.50s "
            "after the failure (rendezvous "
            "1.25s, state handed over in 0.05s); 0 completed steps lost");
  EXPECT_TRUE(w.Step().events.empty());  // the same report again: nothing new
  for (int e = 2; e <= 7; ++e) progress.recoveries.push_back({.epoch = e, .resumed_step = e});
  w.progress = progress;
  EXPECT_EQ(w.Step().events.size(), 6u);
  ASSERT_EQ(w.job.status->recoveries.size(), api::kMaxRecoveryRecords);
  EXPECT_EQ(w.job.status->recoveries.front().epoch, 3);
  EXPECT_EQ(w.Step().events.size(), 0u);  // epochs trimmed from the status are not new again
}

// A worker's pod deleted or evicted by another party (kubectl delete, a drain's eviction): the
// pod is replaced alone as the next incarnation, the job passes through Restarting with an
// event naming the pod and the cause, nothing is counted against backoffLimit, and the
// recovery the trainer reports carries the cause on; a repeated reconcile adds nothing.
TEST(PlannerInPlaceTest, ADisruptedWorkerIsReplacedAloneUncountedAndNamedWithItsCause) {
  World w = Mwm(3);
  w.job.spec.run_policy.backoff_limit = 0;  // a counted restart would fail the job
  AllRunning(w);
  w.Step();
  ASSERT_EQ(w.state(), JobState::kRunning);
  w.pods[1].metadata.deletion_timestamp = w.now;
  PodDetail& why = w.pods[1].mutable_detail();
  w.pods[1].disruption_target = true;
  why.disruption_reason = "EvictionByEvictionAPI";
  why.disruption_message = "Eviction API: evicting";
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kRestarting);
  EXPECT_EQ(w.job.status->restart_count, 0);
  EXPECT_EQ(w.job.status->attempt, 0);
  EXPECT_TRUE(Deleted(p).empty());
  EXPECT_TRUE(Created(p).empty());  // not while the old pod is still there
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].reason, "WorkerEvicted");
  EXPECT_TRUE(p.events[0].essential);
  EXPECT_EQ(p.events[0].message,
            "Worker 1 (pod t-worker-1) was evicted through the Eviction API (a node drain or an "
            "eviction request): Eviction API: evicting; replacing the pod alone: it left the group "
            "at a step boundary, the other replicas keep their state and take its replacement in "
            "(a disruption: not counted against runPolicy.backoffLimit)");
  EXPECT_EQ(w.job.status->incarnations["t-worker-1"], 1);
  EXPECT_TRUE(w.Step().events.empty());  // seen once
  EXPECT_EQ(w.job.status->incarnations["t-worker-1"], 1);

  // The old pod is gone (it exited 143 as it left): the replacement is incarnation 1.
  w.pods.erase(w.pods.begin() + 1);
  p = w.Step();
  ASSERT_EQ(Created(p), V{"t-worker-1"});
  for (const Action& a : p.actions) {
    if (a.child != ChildKind::kPod) continue;
    EXPECT_EQ(a.object["metadata"]["labels"]["lockstep.io/incarnation"], "1");
    EXPECT_EQ(a.why, "attempt 0, incarnation 1");
  }
  w.pods.insert(
      w.pods.begin() + 1,
      WithUid(MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kRunning), "t-worker-1-i1"));
  w.Step();
  EXPECT_EQ(w.state(), JobState::kRunning);
  api::Progress progress{.step = 50};
  progress.recoveries.push_back({.epoch = 1,
                                 .replaced = "worker 1",
                                 .cause = "worker 1 left the group (stopped by SIGTERM)",
                                 .resumed_step = 50});
  w.progress = progress;
  p = w.Step();
  ASSERT_EQ(w.job.status->recoveries.size(), 1u);
  EXPECT_EQ(w.job.status->recoveries[0].cause,
            "worker 1 left the group (stopped by SIGTERM); pod t-worker-1 was evicted through the "
            "Eviction API (a node drain or an eviction request): Eviction API: evicting");
  EXPECT_TRUE(w.job.status->disruptions.empty());
  EXPECT_EQ(w.job.status->restart_count, 0);
  EXPECT_NE(w.state(), JobState::kFailed);
}

// The chief (the coordination service's host) deleted: it leaves at a step boundary as any
// member does and is replaced alone. Were the others stopped too (exit 143, "Terminated": a
// group without in-place recovery checkpoints and stops), those stops are the disruption's,
// not failures counted against backoffLimit.
TEST(PlannerInPlaceTest, TheGroupsStopsForADisruptedChiefAreNotCounted) {
  World w = {.job = Job("MultiWorkerMirrored", {{"Chief", 1}, {"Worker", 2}})};
  w.job.spec.run_policy.backoff_limit = 0;
  AllRunning(w);
  w.Step();
  w.pods[0].metadata.deletion_timestamp = w.now;  // kubectl delete pod t-chief-0
  Plan p = w.Step();
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].reason, "ChiefDeleted");
  EXPECT_THAT(p.events[0].message,
              HasSubstr("replacing the pod alone: it left the group at a step boundary"));
  const std::string stopped = R"({"reason":"Terminated","retryable":true,"message":"stopped"})";
  w.pods[1] = RestartedInPlace(w.pods[1], 143);
  w.pods[1].mutable_detail().failure->message = stopped;
  w.pods[2] = RestartedInPlace(w.pods[2], 143);
  w.pods[2].mutable_detail().failure->message = stopped;
  w.Step();
  EXPECT_NE(w.state(), JobState::kFailed) << w.Cond(api::ConditionType::kFailed).message;
  EXPECT_EQ(w.job.status->restart_count, 0);
}

// ---- success ----

TEST(PlannerSuccessTest, SucceededReplicaIsNeverRecreated) {
  World w = Mwm(2, "ExitCode");
  w.job.spec.success_policy = api::SuccessPolicy::kAllWorkers;
  AllRunning(w);
  w.Step();
  w.pods[1] = MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kSucceeded);
  w.Step();
  EXPECT_EQ(w.job.status->replica_statuses[ReplicaType::kWorker].completed_indexes, "1");
  w.pods.erase(w.pods.begin() + 1);  // its pod was garbage-collected
  Plan p = w.Step();
  EXPECT_TRUE(Created(p).empty());
  EXPECT_EQ(w.job.status->replica_statuses[ReplicaType::kWorker].succeeded, 1);
  // Even across a group restart.
  w.pods[0] = Exited(w.pods[0], 137);
  w.Step();
  w.pods.clear();
  p = w.Step();
  EXPECT_EQ(Created(p), (V{"t-worker-0"}));
}

TEST(PlannerSuccessTest, ChiefDecidesUnderDefaultAndCleanPodPolicyRunning) {
  World w = {.job = Job("ParameterServer", {{"Chief", 1}, {"PS", 1}, {"Worker", 1}})};
  AllRunning(w);
  w.Step();
  w.pods[0] = MakePod(w.job, ReplicaType::kChief, 0, 0, PodPhase::kSucceeded);
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kSucceeded);
  EXPECT_EQ(w.Cond(api::ConditionType::kSucceeded).reason, "ChiefSucceeded");
  // The parameter server goes at once; the worker is given a moment to end on its own (its
  // logs are kept with it), and goes once that has passed.
  EXPECT_EQ(Deleted(p), (V{"t-ps-0"}));
  EXPECT_EQ(p.requeue_after, absl::Seconds(30));
  EXPECT_EQ(Names(p, Action::Kind::kDelete, ChildKind::kService).size(), 3u);
  w.now += absl::Seconds(30);
  EXPECT_EQ(Deleted(w.Step()), (V{"t-ps-0", "t-worker-0"}));  // nothing lingers
}

// A MultiWorkerMirrored group's workers end a moment after the chief: they are not deleted
// while they do, so they end Completed with their logs.
TEST(PlannerSuccessTest, WorkersEndingAfterTheChiefKeepTheirPods) {
  World w = {.job = Job("MultiWorkerMirrored", {{"Chief", 1}, {"Worker", 2}})};
  AllRunning(w);
  w.Step();
  w.pods[0] = MakePod(w.job, ReplicaType::kChief, 0, 0, PodPhase::kSucceeded);
  EXPECT_TRUE(Deleted(w.Step()).empty());
  w.now += absl::Seconds(1);
  w.pods[1] = MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kSucceeded);
  w.pods[2] = MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kSucceeded);
  Plan p = w.Step();
  EXPECT_TRUE(Deleted(p).empty());
  EXPECT_FALSE(p.requeue_after.has_value());
}

// The chief's termination message carries its last progress and its evaluation: the status
// ends on them (the last poll of /progress was up to an interval old), with a Result summary.
TEST(PlannerSuccessTest, TheFinalFiguresComeFromTheChiefsTerminationMessage) {
  World w = {.job = Job("MultiWorkerMirrored", {{"Chief", 1}, {"Worker", 1}})};
  AllRunning(w);
  w.progress = api::Progress{.step = 313, .total_steps = 372};
  w.Step();
  EXPECT_EQ(w.job.status->progress->summary, "84% (313/372)");
  ObservedPod chief = MakePod(w.job, ReplicaType::kChief, 0, 0, PodPhase::kSucceeded);
  chief.mutable_detail().final_progress =
      api::Progress{.step = 372, .total_steps = 372, .loss = 0.31};
  chief.mutable_detail().final_evaluation =
      api::Evaluation{.loss = 0.3187, .metrics = {{"accuracy", 0.88626}}};
  w.pods[0] = chief;
  w.progress.reset();
  w.Step();
  EXPECT_EQ(w.state(), JobState::kSucceeded);
  EXPECT_EQ(w.job.status->progress->summary, "100% (372/372)");
  EXPECT_EQ(w.job.status->progress->step, 372);
  ASSERT_TRUE(w.job.status->evaluation.has_value());
  EXPECT_EQ(w.job.status->evaluation->summary, "accuracy 0.8863, loss 0.3187");
  const api::TrainingJobStatus once = *w.job.status;
  w.Step();
  EXPECT_EQ(*w.job.status, once);  // again: nothing changes
}

TEST(PlannerSuccessTest, CleanPodPolicyAllAndNone) {
  for (std::string policy : {"All", "None"}) {
    World w = Mwm(2, "ExitCode", {{"runPolicy", {{"cleanPodPolicy", policy}}}});
    AllRunning(w);
    w.Step();
    w.pods[0] = MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kSucceeded);
    Plan p = w.Step();
    EXPECT_EQ(w.state(), JobState::kSucceeded);
    EXPECT_EQ(Deleted(p), policy == "All" ? (V{"t-worker-0", "t-worker-1"}) : V{}) << policy;
  }
}

TEST(PlannerSuccessTest, AllWorkersWaitsForEveryWorker) {
  World w = Mwm(2, "ExitCode", {{"successPolicy", "AllWorkers"}});
  AllRunning(w);
  w.Step();
  w.pods[0] = MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kSucceeded);
  w.Step();
  EXPECT_EQ(w.state(), JobState::kRunning);
  w.pods[1] = MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kSucceeded);
  w.Step();
  EXPECT_EQ(w.state(), JobState::kSucceeded);
  EXPECT_EQ(w.Cond(api::ConditionType::kSucceeded).reason, "AllWorkersSucceeded");
}

// ---- timers ----

TEST(PlannerTimerTest, DeadlineRequeuesThenFails) {
  World w = Mwm(2, "ExitCode", {{"runPolicy", {{"activeDeadlineSeconds", 60}}}});
  w.now = kT0;
  Plan p = w.Step();
  EXPECT_EQ(p.requeue_after, absl::Seconds(60));
  AllRunning(w);
  w.now = kT0 + absl::Seconds(59);
  p = w.Step();
  EXPECT_EQ(p.requeue_after, absl::Seconds(1));
  w.now = kT0 + absl::Seconds(60);
  p = w.Step();
  EXPECT_EQ(w.state(), JobState::kFailed);
  EXPECT_EQ(w.Cond(api::ConditionType::kFailed).reason, "DeadlineExceeded");
  EXPECT_EQ(Deleted(p), (V{"t-worker-0", "t-worker-1"}));
}

TEST(PlannerTimerTest, TtlDeletesTheJobWhenDue) {
  World w = Mwm(2, "ExitCode", {{"runPolicy", {{"ttlSecondsAfterFinished", 100}}}});
  AllRunning(w);
  w.Step();
  w.pods[0] = MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kSucceeded);
  Plan p = w.Step();
  EXPECT_EQ(p.requeue_after, absl::Seconds(30));  // worker 1's moment to end on its own
  w.now += absl::Seconds(30);
  p = w.Step();
  EXPECT_EQ(p.requeue_after, absl::Seconds(70));
  w.now += absl::Seconds(70);
  p = w.Step();
  EXPECT_EQ(Names(p, Action::Kind::kDeleteJob, ChildKind::kTrainingJob), (V{"t"}));
}

TEST(PlannerTimerTest, SuspendDeletesEverythingAndResumeResetsStartTime) {
  World w = Mwm();
  AllRunning(w);
  w.Step();
  w.job.status->restart_count = 2;
  w.job.spec.run_policy.suspend = true;
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kSuspended);
  EXPECT_EQ(Deleted(p), (V{"t-worker-0", "t-worker-1"}));
  EXPECT_EQ(Names(p, Action::Kind::kDelete, ChildKind::kService).size(), 2u);
  EXPECT_EQ(w.job.status->restart_count, 2);  // status kept
  w.pods.clear();
  w.services = false;
  w.job.spec.run_policy.suspend = false;
  w.now += absl::Minutes(5);
  p = w.Step();
  EXPECT_EQ(w.state(), JobState::kCreated);
  EXPECT_EQ(w.job.status->start_time, w.now);
  EXPECT_EQ(Created(p), (V{"t-worker-0", "t-worker-1"}));
}

// A pod held by Kueue's admission gate is queued, not stalled; once the job has ended, every
// pod of its group says so to Kueue, and a stopped pod being deleted from a running job has
// Kueue's finalizer taken off so that its replacement can take its name.
TEST(PlannerKueueTest, GatedPodsAreQueuedAndTheGroupIsReleasedAsKueueExpects) {
  World w = Mwm(2, "ExitCode", {{"runPolicy", {{"pendingTimeoutSeconds", 60}}}});
  w.job.metadata.labels["kueue.x-k8s.io/queue-name"] = "team-a";
  w.pods = {MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kPending),
            MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kPending)};
  for (ObservedPod& p : w.pods) {
    p.gated = true;
    p.unschedulable = true;
    p.kueue_finalizer = 0;
  }
  w.job.spec.run_policy.active_deadline_seconds = 600;
  w.now = kT0 + absl::Hours(3);
  w.Step();
  EXPECT_FALSE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kStalled));
  // Three hours in the queue: no start yet, so no deadline passed.
  EXPECT_FALSE(w.job.status->start_time.has_value());
  EXPECT_EQ(w.state(), JobState::kCreated);
  // Admitted and running; worker 1 then preempted: deleted, its container stopped.
  AllRunning(w);
  for (ObservedPod& p : w.pods) p.kueue_finalizer = 0;  // ungated, the finalizer kept
  w.Step();
  EXPECT_EQ(w.state(), JobState::kRunning);
  EXPECT_EQ(w.job.status->start_time, w.now);  // admitted: the deadline counts from here
  // Its containers already stopped when the operator first sees it deleted: still a
  // disruption, said with Kueue's reason, not a failure.
  w.pods[1].metadata.deletion_timestamp = w.now;
  w.pods[1].phase = PodPhase::kFailed;
  w.pods[1].disruption_target = true;
  w.pods[1].mutable_detail().disruption_reason = "WorkloadEvictedDueToPreempted";
  Plan p = w.Step();
  EXPECT_THAT(w.job.status->disruptions["t-worker-1"], HasSubstr("WorkloadEvictedDueToPreempted"));
  std::vector<const Action*> patches;
  for (const Action& a : p.actions) {
    if (a.kind == Action::Kind::kPatch) patches.push_back(&a);
  }
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0]->name, "t-worker-1");
  EXPECT_TRUE(patches[0]->json_patch);
  EXPECT_EQ(patches[0]->object.back(),
            json({{"op", "remove"}, {"path", "/metadata/finalizers/0"}}));
  EXPECT_EQ(w.job.status->restart_count, 0);
  // The job ends: both pods are told the group is done.
  w.pods.pop_back();
  w.pods[0].phase = PodPhase::kSucceeded;
  p = w.Step();
  ASSERT_EQ(w.state(), JobState::kSucceeded);
  patches.clear();
  for (const Action& a : p.actions) {
    if (a.kind == Action::Kind::kPatch) patches.push_back(&a);
  }
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0]->object["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"],
            "false");
  EXPECT_FALSE(patches[0]->json_patch);
  w.pods[0].kueue_group_done = true;
  p = w.Step();
  for (const Action& a : p.actions) EXPECT_NE(a.kind, Action::Kind::kPatch);
}

TEST(PlannerTimerTest, PendingTooLongIsStalledThenClears) {
  World w = Mwm(2, "ExitCode", {{"runPolicy", {{"pendingTimeoutSeconds", 60}}}});
  w.pods = {MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kRunning),
            MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kPending)};
  w.pods[1].unschedulable = true;  // waiting for room: a queue's wait is not a failure
  w.pods[1].mutable_detail().waiting = {};
  w.pods[1].mutable_detail().unschedulable_message = "0/1 nodes are available: 1 Insufficient gpu";
  w.now = kT0 + absl::Seconds(30);
  Plan p = w.Step();
  EXPECT_EQ(p.requeue_after, absl::Seconds(30));
  EXPECT_FALSE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kStalled));
  w.now = kT0 + absl::Seconds(61);
  p = w.Step();
  EXPECT_TRUE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kStalled));
  EXPECT_EQ(w.Cond(api::ConditionType::kStalled).reason, "PodPending");
  EXPECT_THAT(w.Cond(api::ConditionType::kStalled).message, HasSubstr("t-worker-1"));
  EXPECT_THAT(w.Cond(api::ConditionType::kStalled).message, HasSubstr("Insufficient gpu"));
  w.now = kT0 + absl::Seconds(600);
  w.Step();
  EXPECT_EQ(w.state(), JobState::kCreated);  // still waiting, never failed for it
  AllRunning(w);
  w.Step();
  EXPECT_FALSE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kStalled));
  EXPECT_EQ(w.state(), JobState::kRunning);
}

// Issue 42's finding: a missing ConfigMap waited ten minutes in silence, then Stalled, never
// Failed. A pod that cannot start (the kubelet's CreateContainerConfigError, ErrImagePull...)
// is said at once (Stalled with the reason, an essential event) and fails the job once it has
// waited runPolicy.pendingTimeoutSeconds, with the culprit named; its running pods go.
TEST(PlannerTimerTest, APodThatCannotStartIsSaidAtOnceAndFailsTheJobAtTheTimeout) {
  World w = Mwm(2, "ExitCode", {{"runPolicy", {{"pendingTimeoutSeconds", 60}}}});
  w.pods = {MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kRunning),
            MakePod(w.job, ReplicaType::kWorker, 1, 0, PodPhase::kPending)};
  w.pods[1].mutable_detail().waiting = {.kind = ContainerState::Kind::kWaiting,
                                        .reason = "CreateContainerConfigError",
                                        .message = "configmap \"settings\" not found"};
  w.now = kT0 + absl::Seconds(2);
  Plan p = w.Step();
  ASSERT_TRUE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kStalled));
  EXPECT_EQ(w.Cond(api::ConditionType::kStalled).reason, "CreateContainerConfigError");
  EXPECT_THAT(w.Cond(api::ConditionType::kStalled).message,
              HasSubstr("pod t-worker-1 cannot start: CreateContainerConfigError: configmap "
                        "\"settings\" not found; the job fails if it still cannot at"));
  bool said = false;
  for (const PlannedEvent& e : p.events) {
    said = said || (e.reason == "CreateContainerConfigError" && e.essential);
  }
  EXPECT_TRUE(said);
  EXPECT_EQ(p.requeue_after, absl::Seconds(58));
  EXPECT_TRUE(w.Step().events.empty());  // said once
  w.now = kT0 + absl::Seconds(60);
  p = w.Step();
  EXPECT_EQ(w.state(), JobState::kFailed);
  EXPECT_EQ(w.Cond(api::ConditionType::kFailed).reason, "WorkerCreateContainerConfigError");
  EXPECT_THAT(w.Cond(api::ConditionType::kFailed).message,
              HasSubstr("configmap \"settings\" not found (still, after "
                        "runPolicy.pendingTimeoutSeconds 60)"));
  EXPECT_EQ(Deleted(p), (V{"t-worker-0", "t-worker-1"}));  // cleanPodPolicy Running
}

// A volume that cannot mount shows only as ContainerCreating in the pod (its FailedMount events,
// which the reconciler reads past the grace, say why): the planner looks again when the grace
// ends, then treats the event's message as it does the kubelet's other reasons.
TEST(PlannerTimerTest, AFailedMountIsAReasonThePodCannotStart) {
  World w = Mwm(1, "ExitCode", {{"runPolicy", {{"pendingTimeoutSeconds", 60}}}});
  w.pods = {MakePod(w.job, ReplicaType::kWorker, 0, 0, PodPhase::kPending)};  // ContainerCreating
  w.now = kT0 + absl::Seconds(4);
  EXPECT_EQ(w.Step().requeue_after, absl::Seconds(6));  // the grace's end
  EXPECT_FALSE(WaitsToMount(w.pods[0], w.now));
  w.now = kT0 + kMountGrace;
  EXPECT_TRUE(WaitsToMount(w.pods[0], w.now));
  w.mount_failures["t-worker-0"] =
      "MountVolume.SetUp failed for volume \"data\" : "
      "persistentvolumeclaim \"data\" not found";
  w.Step();
  EXPECT_EQ(w.Cond(api::ConditionType::kStalled).reason, "FailedMount");
  w.now = kT0 + absl::Seconds(60);
  w.Step();
  EXPECT_EQ(w.Cond(api::ConditionType::kFailed).reason, "WorkerFailedMount");
  EXPECT_THAT(w.Cond(api::ConditionType::kFailed).message,
              HasSubstr("persistentvolumeclaim \"data\" not found"));
}

// A status changes only when something a user would act on does: a job held Stalled, one
// Running and one Suspended, reconciled 100 times with only the clock moving, write no status
// after the first (the Stalled message states since when, not for how long).
TEST(PlannerTimerTest, NothingButTheClockMovingChangesNoStatus) {
  World stalled = Mwm(2, "ExitCode", {{"runPolicy", {{"pendingTimeoutSeconds", 60}}}});
  stalled.pods = {MakePod(stalled.job, ReplicaType::kWorker, 0, 0, PodPhase::kRunning),
                  MakePod(stalled.job, ReplicaType::kWorker, 1, 0, PodPhase::kPending)};
  stalled.now = kT0 + absl::Seconds(61);
  World running = Mwm(2, "ExitCode", {{"runPolicy", {{"progressDeadlineSeconds", 100000}}}});
  AllRunning(running);
  World suspended = Mwm(2);
  suspended.job.spec.run_policy.suspend = true;
  for (World* w : {&stalled, &running, &suspended}) {
    w->Step();
    w->Step();  // settled
  }
  ASSERT_TRUE(api::IsConditionTrue(stalled.job.status->conditions, api::ConditionType::kStalled));
  EXPECT_THAT(stalled.Cond(api::ConditionType::kStalled).message,
              HasSubstr("has been Pending since 2"));
  ASSERT_EQ(running.state(), JobState::kRunning);
  ASSERT_EQ(suspended.state(), JobState::kSuspended);
  for (World* w : {&stalled, &running, &suspended}) {
    const api::TrainingJobStatus settled = *w->job.status;
    for (int i = 0; i < 100; ++i) {
      w->now += absl::Seconds(7);
      Plan p = w->Step();
      ASSERT_EQ(p.status, settled)
          << "reconcile " << i << " of the "
          << api::NameOf<JobState>(api::kJobStateNames, settled.state) << " job";
      ASSERT_TRUE(p.events.empty()) << p.events[0].reason;
    }
  }
}

TEST(PlannerTimerTest, NoProgressIsStalled) {
  World w = Mwm(2, "ExitCode", {{"runPolicy", {{"progressDeadlineSeconds", 300}}}});
  AllRunning(w);
  w.now = kT0;
  w.Step();  // Running since kT0
  w.progress = api::Progress{.step = 10, .total_steps = 100};
  w.now = kT0 + absl::Seconds(100);
  Plan p = w.Step();
  EXPECT_EQ(w.job.status->progress->summary, "10% (10/100)");
  EXPECT_EQ(w.job.status->progress->update_time, w.now);
  EXPECT_EQ(p.requeue_after, absl::Seconds(300));
  w.now = kT0 + absl::Seconds(400);  // same step again: no progress since kT0+100
  w.Step();
  EXPECT_EQ(w.job.status->progress->update_time, kT0 + absl::Seconds(100));
  EXPECT_TRUE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kStalled));
  EXPECT_EQ(w.Cond(api::ConditionType::kStalled).reason, "NoProgress");
  w.progress->step = 11;
  w.Step();
  EXPECT_FALSE(api::IsConditionTrue(w.job.status->conditions, api::ConditionType::kStalled));
}

TEST(PlannerTest, InvalidSpecNamesTheField) {
  World w = Mwm();
  w.job.spec.replica_specs[ReplicaType::kPS].replicas = 1;
  Plan p = w.Step();
  EXPECT_EQ(w.state(), JobState::kFailed);
  EXPECT_THAT(w.Cond(api::ConditionType::kFailed).message, HasSubstr("spec.replicaSpecs"));
  EXPECT_TRUE(Created(p).empty());
}

TEST(PlannerTest, IndexesRoundTrip) {
  EXPECT_EQ(FormatIndexes({0, 2, 3, 4, 7}), "0,2-4,7");
  EXPECT_EQ(ParseIndexes("0,2-4,7"), (std::set<int32_t>{0, 2, 3, 4, 7}));
  EXPECT_EQ(ParseIndexes("x,3,-1,5-2"), (std::set<int32_t>{3}));
}

}  // namespace
}  // namespace lockstep::trainingjob
