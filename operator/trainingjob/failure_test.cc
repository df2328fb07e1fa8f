#include "operator/trainingjob/failure.h"

#include <gtest/gtest.h>

#include "operator/trainingjob/testing.h"

namespace lockstep::trainingjob {
namespace {

using api::ReplicaType;
using nlohmann::json;
using testing::Exited;
using testing::Job;
using testing::MakePod;

PodFailure Fail(const ObservedPod& pod, ReplicaType t) { return DescribeFailure(pod, t, 0); }

TEST(FailureTest, DescribesExitCodeAndTerminationMessage) {
  api::TrainingJob job = Job("MultiWorkerMirrored", {{"Worker", 2, "ExitCode"}});
  ObservedPod pod = Exited(MakePod(job, ReplicaType::kWorker, 0, 0, PodPhase::kRunning), 1,
                           R"({"reason":"PeerLost","retryable":true,"message":"rank 1 gone"})");
  PodFailure f = Fail(pod, ReplicaType::kWorker);
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_EQ(f.reason, "PeerLost");
  EXPECT_EQ(f.retryable, true);
  EXPECT_FALSE(f.restarted_in_place);
  EXPECT_EQ(FailureReason(f), "WorkerExitedWithCode1");
  EXPECT_EQ(FailureMessage(f),
            "Worker 0 (pod t-worker-0) exited with code 1 (PeerLost: rank 1 gone)");
  // The message said retryable, so exit code 1 restarts the pod (alone: the group recovers in
  // place) instead of failing.
  EXPECT_EQ(DecideFailure(f, job.spec).remedy, Remedy::kRestartPod);
}

struct DecisionRow {
  std::string name;
  std::string strategy;
  std::vector<testing::ReplicaDesc> replicas;
  json extra;
  ReplicaType type;
  std::function<ObservedPod(ObservedPod)> fail;
  Remedy remedy;
  bool counted;
};

class DecisionTest : public ::testing::TestWithParam<DecisionRow> {};

TEST_P(DecisionTest, Decides) {
  const DecisionRow& row = GetParam();
  api::TrainingJob job = Job(row.strategy, row.replicas, row.extra);
  ObservedPod pod = row.fail(MakePod(job, row.type, 0, 0, PodPhase::kRunning));
  FailureDecision d = DecideFailure(DescribeFailure(pod, row.type, 0), job.spec);
  EXPECT_EQ(d.remedy, row.remedy) << d.source;
  EXPECT_EQ(d.counted, row.counted) << d.source;
}

ObservedPod Code(ObservedPod p, int code) { return Exited(std::move(p), code); }
ObservedPod Evicted(ObservedPod p) {
  p = Exited(std::move(p), 137);
  p.mutable_detail().reason = "Evicted";
  return p;
}
ObservedPod DisruptionTarget(ObservedPod p) {
  p = Exited(std::move(p), 143);
  p.disruption_target = true;
  return p;
}

const std::vector<testing::ReplicaDesc> kMwmExitCode = {{"Worker", 2, "ExitCode"}};
const std::vector<testing::ReplicaDesc> kPs = {{"Chief", 1, "ExitCode"},
                                               {"PS", 1, "ExitCode"},
                                               {"Worker", 2, "ExitCode"},
                                               {"Evaluator", 1, "ExitCode"}};

json Rules(json rules) { return {{"failurePolicy", {{"rules", std::move(rules)}}}}; }

INSTANTIATE_TEST_SUITE_P(
    Rules, DecisionTest,
    ::testing::Values(
        DecisionRow{"ExitCodeRetryableRestartsThePodInPlace",
                    "MultiWorkerMirrored",
                    kMwmExitCode,
                    {},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kRestartPod,
                    true},
        DecisionRow{"ExitCodeRetryableRestartsTheGroupWithoutInPlaceRecovery",
                    "MultiWorkerMirrored",
                    kMwmExitCode,
                    {{"runPolicy", {{"recovery", "RestartGroup"}}}},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kRestartGroup,
                    true},
        DecisionRow{"TheChiefIsReplacedAloneInPlaceToo",
                    "MultiWorkerMirrored",
                    {{"Chief", 1, "ExitCode"}, {"Worker", 2, "ExitCode"}},
                    {},
                    ReplicaType::kChief,
                    [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kRestartPod,
                    true},
        DecisionRow{"ExitCodePermanentFails",
                    "MultiWorkerMirrored",
                    kMwmExitCode,
                    {},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Code(p, 1); },
                    Remedy::kFailJob,
                    true},
        DecisionRow{"Exit128IsRetryable",
                    "MultiWorkerMirrored",
                    kMwmExitCode,
                    {},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Code(p, 128); },
                    Remedy::kRestartPod,
                    true},
        DecisionRow{"Exit127IsPermanent",
                    "MultiWorkerMirrored",
                    kMwmExitCode,
                    {},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Code(p, 127); },
                    Remedy::kFailJob,
                    true},
        DecisionRow{"NeverFailsOnAnyCode",
                    "MultiWorkerMirrored",
                    {{"Worker", 2, "Never"}},
                    {},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kFailJob,
                    true},
        DecisionRow{"OnFailureRestartedByTheKubeletIsThePodsRestart",
                    "MultiWorkerMirrored",
                    {{"Worker", 2, "OnFailure"}},
                    {},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return testing::RestartedInPlace(p, 1); },
                    Remedy::kRestartPod,
                    true},
        DecisionRow{"PsStrategyWorkerRestartsAlone",
                    "ParameterServer",
                    kPs,
                    {},
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kRestartPod,
                    true},
        DecisionRow{"PsStrategyPsRestartsGroup",
                    "ParameterServer",
                    kPs,
                    {},
                    ReplicaType::kPS,
                    [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kRestartGroup,
                    true},
        DecisionRow{"PsStrategyChiefRestartsGroup",
                    "ParameterServer",
                    kPs,
                    {},
                    ReplicaType::kChief,
                    [](ObservedPod p) { return Code(p, 143); },
                    Remedy::kRestartGroup,
                    true},
        DecisionRow{"EvaluatorRetryableRestartsAlone",
                    "ParameterServer",
                    kPs,
                    {},
                    ReplicaType::kEvaluator,
                    [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kRestartPod,
                    true},
        DecisionRow{"EvaluatorPermanentIsLeftNotFatal",
                    "ParameterServer",
                    kPs,
                    {},
                    ReplicaType::kEvaluator,
                    [](ObservedPod p) { return Code(p, 2); },
                    Remedy::kLeaveFailed,
                    true},
        DecisionRow{"EvictionIsNotCounted",
                    "MultiWorkerMirrored",
                    kMwmExitCode,
                    {},
                    ReplicaType::kWorker,
                    Evicted,
                    Remedy::kRestartPod,
                    false},
        DecisionRow{"DisruptionTargetIsNotCounted",
                    "ParameterServer",
                    kPs,
                    {},
                    ReplicaType::kWorker,
                    DisruptionTarget,
                    Remedy::kRestartPod,
                    false},
        DecisionRow{
            "RuleFailJobOnCode", "MultiWorkerMirrored", kMwmExitCode,
            Rules(json::parse(
                R"([{"action":"FailJob","onExitCodes":{"operator":"In","values":[137]}}])")),
            ReplicaType::kWorker, [](ObservedPod p) { return Code(p, 137); }, Remedy::kFailJob,
            true},
        DecisionRow{
            "RuleNotInMatchesOtherCodes", "MultiWorkerMirrored", kMwmExitCode,
            Rules(json::parse(
                R"([{"action":"RestartJob","onExitCodes":{"operator":"NotIn","values":[1]}}])")),
            ReplicaType::kWorker, [](ObservedPod p) { return Code(p, 3); }, Remedy::kRestartGroup,
            true},
        DecisionRow{
            "RuleNotInSkipsListedCode", "MultiWorkerMirrored", kMwmExitCode,
            Rules(json::parse(
                R"([{"action":"RestartJob","onExitCodes":{"operator":"NotIn","values":[1]}}])")),
            ReplicaType::kWorker, [](ObservedPod p) { return Code(p, 1); }, Remedy::kFailJob, true},
        DecisionRow{"RuleIgnoreOnReason", "MultiWorkerMirrored", kMwmExitCode,
                    Rules(json::parse(R"([{"action":"Ignore","onReasons":["PeerLost"]}])")),
                    ReplicaType::kWorker,
                    [](ObservedPod p) { return Exited(p, 1, R"({"reason":"PeerLost"})"); },
                    Remedy::kRestartPod, false},
        DecisionRow{"RuleRestartPodInMwm", "MultiWorkerMirrored", kMwmExitCode,
                    Rules(json::parse(R"([{"action":"RestartPod","replicaTypes":["Worker"]}])")),
                    ReplicaType::kWorker, [](ObservedPod p) { return Code(p, 1); },
                    Remedy::kRestartPod, true},
        DecisionRow{
            "FirstMatchingRuleWins", "MultiWorkerMirrored", kMwmExitCode,
            Rules(json::parse(
                R"([{"action":"RestartPod","onExitCodes":{"operator":"In","values":[3]}},{"action":"FailJob"}])")),
            ReplicaType::kWorker, [](ObservedPod p) { return Code(p, 3); }, Remedy::kRestartPod,
            true},
        DecisionRow{"RuleForOtherTypeDoesNotMatch", "MultiWorkerMirrored", kMwmExitCode,
                    Rules(json::parse(R"([{"action":"FailJob","replicaTypes":["Chief"]}])")),
                    ReplicaType::kWorker, [](ObservedPod p) { return Code(p, 137); },
                    Remedy::kRestartPod, true},
        DecisionRow{"UntypedRuleSkipsEvaluator", "ParameterServer", kPs,
                    Rules(json::parse(R"([{"action":"FailJob"}])")), ReplicaType::kEvaluator,
                    [](ObservedPod p) { return Code(p, 137); }, Remedy::kRestartPod, true}),
    [](const ::testing::TestParamInfo<DecisionRow>& row) { return row.param.name; });

TEST(FailureTest, FailureCountAddsContainerRestarts) {
  api::TrainingJob job = Job("MultiWorkerMirrored", {{"Worker", 2}});
  ObservedPod pod = MakePod(job, ReplicaType::kWorker, 0, 0, PodPhase::kRunning);
  EXPECT_EQ(FailureCount(pod), 0);
  EXPECT_EQ(FailureCount(testing::RestartedInPlace(pod, 137, 2)), 2);
  EXPECT_EQ(FailureCount(Exited(testing::RestartedInPlace(pod, 137, 2), 1)), 3);
}

TEST(FailureTest, PlainTextTerminationMessageIsKept) {
  api::TrainingJob job = Job("MultiWorkerMirrored", {{"Worker", 2}});
  PodFailure f =
      DescribeFailure(Exited(MakePod(job, ReplicaType::kWorker, 1, 0, PodPhase::kRunning), 2,
                             "no such file: /data"),
                      ReplicaType::kWorker, 1);
  EXPECT_EQ(f.message, "no such file: /data");
  EXPECT_EQ(f.reason, "Error");
}

}  // namespace
}  // namespace lockstep::trainingjob
