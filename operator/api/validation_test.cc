#include "operator/api/validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/api/test_util.h"

namespace lockstep::api {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::MinimalJob;
using testing::Replica;

TEST(ValidationTest, EveryExampleIsValid) {
  for (const auto& [file, doc] : testing::Examples()) {
    TrainingJob job;
    FieldErrors errors = CheckTrainingJob(doc, &job);
    EXPECT_TRUE(errors.empty()) << file << ": " << errors.front().ToString();
  }
}

TEST(ValidationTest, MinimalJobIsValidAndDefaulted) {
  TrainingJob job;
  ASSERT_TRUE(CheckTrainingJob(MinimalJob(), &job).empty());
  EXPECT_EQ(job.spec.run_policy.backoff_limit, kDefaultBackoffLimit);
  EXPECT_EQ(job.spec.run_policy.clean_pod_policy, CleanPodPolicy::kRunning);
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kWorker).restart_policy,
            RestartPolicy::kOnFailure);
  EXPECT_TRUE(job.spec.tf_config.include_evaluator);
}

TEST(ValidationTest, StatusCarriesEveryErrorAndTheJobName) {
  json j = MinimalJob();
  j["spec"]["replicaSpecs"]["Chief"]["replicas"] = 2;
  j["spec"]["runPolicy"] = {{"backoffLimit", -1}};
  absl::StatusOr<TrainingJob> job = TrainingJobFromJson(j);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("TrainingJob \"job\" is invalid: "));
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("spec.replicaSpecs.Chief.replicas: Too many: 2"));
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("spec.runPolicy.backoffLimit: Invalid value: -1: must be greater than or "
                        "equal to 0"));
}

TEST(ValidationTest, EffectiveStrategyFollowsTheShape) {
  TrainingJobSpec spec;
  spec.replica_specs[ReplicaType::kWorker].replicas = 1;
  EXPECT_EQ(EffectiveStrategy(spec), Strategy::kOneDevice);
  spec.replica_specs[ReplicaType::kWorker].replicas = 3;
  EXPECT_EQ(EffectiveStrategy(spec), Strategy::kMultiWorkerMirrored);
  spec.replica_specs[ReplicaType::kPS].replicas = 1;
  EXPECT_EQ(EffectiveStrategy(spec), Strategy::kParameterServer);
  spec.strategy = Strategy::kMirrored;
  EXPECT_EQ(EffectiveStrategy(spec), Strategy::kMirrored);
}

TEST(ValidationTest, ReplicaNames) {
  EXPECT_EQ(ReplicaName("fmnist", ReplicaType::kWorker, 1), "fmnist-worker-1");
  EXPECT_EQ(ReplicaName("t", ReplicaType::kPS, 0), "t-ps-0");
  EXPECT_EQ(ReplicaName("t", ReplicaType::kEvaluator, 0), "t-evaluator-0");
}

TEST(ValidationTest, LongestAllowedNameIsAccepted) {
  json j = MinimalJob();  // longest pod: <name>-worker-1 (9 more characters)
  j["metadata"]["name"] = std::string(54, 'a');
  TrainingJob job;
  EXPECT_TRUE(CheckTrainingJob(j, &job).empty());
  j["metadata"]["name"] = std::string(55, 'a');
  EXPECT_FALSE(CheckTrainingJob(j, &job).empty());
}

class InvalidManifestTest : public ::testing::TestWithParam<testing::ManifestCase> {};

TEST_P(InvalidManifestTest, IsRejectedWithTheFieldNamed) {
  json j = MinimalJob();
  GetParam().mutate(j);
  TrainingJob job;
  FieldErrors errors = CheckTrainingJob(j, &job);
  ASSERT_FALSE(errors.empty()) << "accepted: " << j.dump();
  testing::ExpectErrorAt(errors, GetParam().path, GetParam().message);
}

json& Specs(json& j) { return j["spec"]["replicaSpecs"]; }
json& Pod(json& j, const char* type) { return Specs(j)[type]["template"]["spec"]; }

INSTANTIATE_TEST_SUITE_P(
    All, InvalidManifestTest,
    ::testing::Values(
        testing::ManifestCase{"MissingName", [](json& j) { j["metadata"].erase("name"); },
                    "metadata.name", "Required value"},
        testing::ManifestCase{"UpperCaseName", [](json& j) { j["metadata"]["name"] = "MyJob"; },
                    "metadata.name", "must consist of lower case alphanumeric characters"},
        testing::ManifestCase{"NameStartsWithDigit", [](json& j) { j["metadata"]["name"] = "1job"; },
                    "metadata.name", "start with an alphabetic character"},
        testing::ManifestCase{"NameTooLongForPods", [](json& j) { j["metadata"]["name"] = std::string(60, 'a'); },
                    "metadata.name", "would have 69 characters and the limit is 63"},
        testing::ManifestCase{"NameTooLongWithManyWorkers", [](json& j) {
                      j["metadata"]["name"] = std::string(53, 'b');
                      Specs(j)["Worker"]["replicas"] = 10000;
                    },
                    "metadata.name", "must be no more than 51 characters"},
        testing::ManifestCase{"BadNamespace", [](json& j) { j["metadata"]["namespace"] = "Team_A"; },
                    "metadata.namespace", "lower case alphanumeric"},
        testing::ManifestCase{"NoReplicaSpecs", [](json& j) { j["spec"].erase("replicaSpecs"); },
                    "spec.replicaSpecs", "Required value"},
        testing::ManifestCase{"EmptyReplicaSpecs", [](json& j) { Specs(j) = json::object(); },
                    "spec.replicaSpecs", "at least one replica type"},
        testing::ManifestCase{"OnlyEvaluator", [](json& j) { Specs(j) = {{"Evaluator", Replica(1)}}; },
                    "spec.replicaSpecs", "at least one Chief or Worker replica"},
        testing::ManifestCase{"NegativeReplicas", [](json& j) { Specs(j)["Worker"]["replicas"] = -1; },
                    "spec.replicaSpecs.Worker.replicas", "Invalid value: -1: must be greater than or equal to 0"},
        testing::ManifestCase{"TwoChiefs", [](json& j) { Specs(j)["Chief"]["replicas"] = 2; },
                    "spec.replicaSpecs.Chief.replicas", "Too many: 2: a job has at most 1 Chief replica"},
        testing::ManifestCase{"TwoEvaluators", [](json& j) { Specs(j)["Evaluator"] = Replica(2); },
                    "spec.replicaSpecs.Evaluator.replicas", "at most 1 Evaluator replica"},
        testing::ManifestCase{"ParameterServerWithoutPS", [](json& j) { j["spec"]["strategy"] = "ParameterServer"; },
                    "spec.replicaSpecs.PS", "strategy ParameterServer needs at least one PS replica"},
        testing::ManifestCase{"ParameterServerWithoutWorkers", [](json& j) {
                      j["spec"]["strategy"] = "ParameterServer";
                      Specs(j) = {{"Chief", Replica(1)}, {"PS", Replica(1)}};
                    },
                    "spec.replicaSpecs.Worker", "needs at least one Worker replica"},
        testing::ManifestCase{"MultiWorkerMirroredWithPS", [](json& j) { Specs(j)["PS"] = Replica(1); },
                    "spec.replicaSpecs.PS", "Forbidden: strategy MultiWorkerMirrored all-reduces between workers"},
        testing::ManifestCase{"MirroredWithThreeReplicas", [](json& j) { j["spec"]["strategy"] = "Mirrored"; },
                    "spec.replicaSpecs", "strategy Mirrored trains in one process and needs exactly one Chief or Worker replica, found 3"},
        testing::ManifestCase{"OneDeviceWithTwoWorkers", [](json& j) {
                      j["spec"]["strategy"] = "OneDevice";
                      Specs(j) = {{"Worker", Replica(2)}};
                    },
                    "spec.replicaSpecs", "exactly one Chief or Worker replica, found 2"},
        testing::ManifestCase{"CentralStorageWithPS", [](json& j) {
                      j["spec"]["strategy"] = "CentralStorage";
                      Specs(j) = {{"Worker", Replica(1)}, {"PS", Replica(1)}};
                    },
                    "spec.replicaSpecs.PS", "strategy CentralStorage has no parameter servers"},
        testing::ManifestCase{"MissingTemplate", [](json& j) { Specs(j)["Worker"].erase("template"); },
                    "spec.replicaSpecs.Worker.template", "Required value"},
        testing::ManifestCase{"NoContainers", [](json& j) { Pod(j, "Worker")["containers"] = json::array(); },
                    "spec.replicaSpecs.Worker.template.spec.containers", "at least one container"},
        testing::ManifestCase{"ContainerWithoutImage", [](json& j) { Pod(j, "Worker")["containers"][0].erase("image"); },
                    "spec.replicaSpecs.Worker.template.spec.containers[0].image", "Required value"},
        testing::ManifestCase{"DuplicateContainerNames", [](json& j) {
                      Pod(j, "Chief")["containers"].push_back(testing::Container());
                    },
                    "spec.replicaSpecs.Chief.template.spec.containers[1].name", "Duplicate value: \"trainer\""},
        testing::ManifestCase{"PortOutOfRange", [](json& j) {
                      Pod(j, "Worker")["containers"][0]["ports"] = {{{"name", "lockstep"}, {"containerPort", 70000}}};
                    },
                    "spec.replicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort", "between 1 and 65535"},
        testing::ManifestCase{"VolumeMountOfNoVolume", [](json& j) {
                      Pod(j, "Worker")["containers"][0]["volumeMounts"] = {{{"name", "data"}, {"mountPath", "/data"}}};
                    },
                    "spec.replicaSpecs.Worker.template.spec.containers[0].volumeMounts[0].name", "Not found: \"data\""},
        testing::ManifestCase{"DuplicateVolumes", [](json& j) {
                      Pod(j, "Worker")["volumes"] = {{{"name", "data"}, {"emptyDir", json::object()}},
                                                     {{"name", "data"}, {"emptyDir", json::object()}}};
                    },
                    "spec.replicaSpecs.Worker.template.spec.volumes[1].name", "Duplicate value: \"data\""},
        testing::ManifestCase{"VolumeMountWithoutPath", [](json& j) {
                      Pod(j, "Worker")["volumes"] = {{{"name", "data"}, {"emptyDir", json::object()}}};
                      Pod(j, "Worker")["containers"][0]["volumeMounts"] = {{{"name", "data"}}};
                    },
                    "spec.replicaSpecs.Worker.template.spec.containers[0].volumeMounts[0].mountPath", "Required value"},
        testing::ManifestCase{"NegativeBackoff", [](json& j) { j["spec"]["runPolicy"] = {{"backoffLimit", -3}}; },
                    "spec.runPolicy.backoffLimit", "must be greater than or equal to 0"},
        testing::ManifestCase{"ZeroDeadline", [](json& j) { j["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 0}}; },
                    "spec.runPolicy.activeDeadlineSeconds", "must be greater than or equal to 1"},
        testing::ManifestCase{"NegativeTtl", [](json& j) { j["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", -1}}; },
                    "spec.runPolicy.ttlSecondsAfterFinished", "greater than or equal to 0"},
        testing::ManifestCase{"ZeroPendingTimeout", [](json& j) { j["spec"]["runPolicy"] = {{"pendingTimeoutSeconds", 0}}; },
                    "spec.runPolicy.pendingTimeoutSeconds", "greater than or equal to 1"},
        testing::ManifestCase{"BadRecovery", [](json& j) { j["spec"]["runPolicy"] = {{"recovery", "Sometimes"}}; },
                    "spec.runPolicy.recovery", "supported values: \"InPlace\", \"RestartGroup\""},
        testing::ManifestCase{"InPlaceWithParameterServers", [](json& j) {
                      j["spec"]["strategy"] = "ParameterServer";
                      Specs(j).erase("Chief");
                      Specs(j)["PS"] = Specs(j)["Worker"];
                      j["spec"]["runPolicy"] = {{"recovery", "InPlace"}};
                    },
                    "spec.runPolicy.recovery", "in-place recovery is for MultiWorkerMirrored groups, not ParameterServer"},
        testing::ManifestCase{"ElasticParameterServer", [](json& j) {
                      j["spec"]["strategy"] = "ParameterServer";
                      Specs(j).erase("Chief");
                      Specs(j)["PS"] = Replica(1);
                      j["spec"]["runPolicy"] = {{"elastic", {{"maxReplicas", 4}}}};
                    },
                    "spec.runPolicy.elastic", "elastic workers are for MultiWorkerMirrored groups, not ParameterServer"},
        testing::ManifestCase{"ElasticRestartGroup", [](json& j) {
                      j["spec"]["runPolicy"] = {{"recovery", "RestartGroup"}, {"elastic", {{"maxReplicas", 4}}}};
                    },
                    "spec.runPolicy.elastic", "needs recovery InPlace"},
        testing::ManifestCase{"ElasticMaxBelowMin", [](json& j) {
                      j["spec"]["runPolicy"] = {{"elastic", {{"minReplicas", 3}, {"maxReplicas", 2}}}};
                    },
                    "spec.runPolicy.elastic.maxReplicas", "must be at least minReplicas (3)"},
        testing::ManifestCase{"ElasticInAKueuePodGroup", [](json& j) {
                      j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a";
                      j["spec"]["runPolicy"] = {{"elastic", {{"maxReplicas", 4}}}};
                    },
                    "spec.runPolicy.elastic", "one Kueue pod group of a fixed size"},
        testing::ManifestCase{"ElasticZeroMin", [](json& j) {
                      j["spec"]["runPolicy"] = {{"elastic", {{"minReplicas", 0}, {"maxReplicas", 2}}}};
                    },
                    "spec.runPolicy.elastic.minReplicas", "greater than or equal to 1"},
        testing::ManifestCase{"BadCleanPodPolicy", [](json& j) { j["spec"]["runPolicy"] = {{"cleanPodPolicy", "Some"}}; },
                    "spec.runPolicy.cleanPodPolicy", "supported values: \"All\", \"Running\", \"None\""},
        testing::ManifestCase{"MinAvailableAboveReplicas", [](json& j) {
                      j["spec"]["runPolicy"] = {{"schedulingPolicy", {{"minAvailable", 4}}}};
                    },
                    "spec.runPolicy.schedulingPolicy.minAvailable", "must not exceed the job's 3 replicas"},
        testing::ManifestCase{"BadPriorityClass", [](json& j) {
                      j["spec"]["runPolicy"] = {{"schedulingPolicy", {{"priorityClass", "High Priority"}}}};
                    },
                    "spec.runPolicy.schedulingPolicy.priorityClass", "lower case alphanumeric"},
        testing::ManifestCase{"AllWorkersWithoutWorkers", [](json& j) {
                      j["spec"]["successPolicy"] = "AllWorkers";
                      j["spec"]["strategy"] = "OneDevice";
                      Specs(j) = {{"Chief", Replica(1)}};
                    },
                    "spec.successPolicy", "AllWorkers needs at least one Worker replica"},
        testing::ManifestCase{"RuleWithoutMatcher", [](json& j) {
                      j["spec"]["failurePolicy"] = {{"rules", {{{"action", "Ignore"}}}}};
                    },
                    "spec.failurePolicy.rules[0]", "needs onExitCodes or onReasons"},
        testing::ManifestCase{"RuleWithoutAction", [](json& j) {
                      j["spec"]["failurePolicy"] = {{"rules", {{{"onReasons", {"Evicted"}}}}}};
                    },
                    "spec.failurePolicy.rules[0].action", "Required value"},
        testing::ManifestCase{"RuleExitCodeZero", [](json& j) {
                      j["spec"]["failurePolicy"] = {{"rules", {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "In"}, {"values", {0, 1}}}}}}}};
                    },
                    "spec.failurePolicy.rules[0].onExitCodes.values[0]", "exit code 0 means success"},
        testing::ManifestCase{"RuleDuplicateExitCode", [](json& j) {
                      j["spec"]["failurePolicy"] = {{"rules", {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "NotIn"}, {"values", {137, 137}}}}}}}};
                    },
                    "spec.failurePolicy.rules[0].onExitCodes.values[1]", "Duplicate value: 137"},
        testing::ManifestCase{"RuleEmptyExitCodes", [](json& j) {
                      j["spec"]["failurePolicy"] = {{"rules", {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "In"}, {"values", json::array()}}}}}}};
                    },
                    "spec.failurePolicy.rules[0].onExitCodes.values", "list at least one exit code"},
        testing::ManifestCase{"RuleForAbsentReplicaType", [](json& j) {
                      j["spec"]["failurePolicy"] = {{"rules", {{{"action", "RestartPod"}, {"onReasons", {"PeerLost"}}, {"replicaTypes", {"PS"}}}}}};
                    },
                    "spec.failurePolicy.rules[0].replicaTypes[0]", "no such replica type"},
        testing::ManifestCase{"RuleUnknownAction", [](json& j) {
                      j["spec"]["failurePolicy"] = {{"rules", {{{"action", "Retry"}, {"onReasons", {"x"}}}}}};
                    },
                    "spec.failurePolicy.rules[0].action", "Unsupported value: \"Retry\""},
        testing::ManifestCase{"BadClusterDomain", [](json& j) { j["spec"]["tfConfig"] = {{"clusterDomain", ".cluster.local"}}; },
                    "spec.tfConfig.clusterDomain", "must start and end with an alphanumeric"},
        testing::ManifestCase{"WrongApiVersion", [](json& j) { j["apiVersion"] = "kubeflow.org/v1"; },
                    "apiVersion", "supported values: \"lockstep.io/v1alpha1\""}),
    [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace lockstep::api
