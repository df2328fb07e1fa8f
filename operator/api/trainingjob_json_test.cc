#include "operator/api/trainingjob_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/api/manifest.h"
#include "operator/api/test_util.h"

namespace lockstep::api {
namespace {

using ::nlohmann::json;
using testing::Examples;
using ::testing::HasSubstr;
using testing::MinimalJob;

std::string Dump(const json& j) { return j.dump(); }

TEST(TrainingJobJsonTest, EveryExampleRoundTripsByteStable) {
  auto examples = Examples();
  ASSERT_GE(examples.size(), 4u);
  for (const auto& [file, doc] : examples) {
    SCOPED_TRACE(file);
    FieldErrors errors;
    TrainingJob first = DecodeTrainingJob(doc, &errors);
    ASSERT_TRUE(errors.empty()) << errors.front().ToString();
    const std::string once = Dump(EncodeTrainingJob(first));
    TrainingJob second = DecodeTrainingJob(json::parse(once), &errors);
    ASSERT_TRUE(errors.empty()) << errors.front().ToString();
    EXPECT_EQ(first, second);
    EXPECT_EQ(once, Dump(EncodeTrainingJob(second)));
  }
}

TEST(TrainingJobJsonTest, PodTemplateIsPreservedExactly) {
  for (const auto& [file, doc] : Examples()) {
    SCOPED_TRACE(file);
    FieldErrors errors;
    json encoded = EncodeTrainingJob(DecodeTrainingJob(doc, &errors));
    for (const auto& [type, rs] : doc["spec"]["replicaSpecs"].items()) {
      EXPECT_EQ(encoded["spec"]["replicaSpecs"][type]["template"], rs["template"]) << type;
    }
  }
}

TEST(TrainingJobJsonTest, UnknownTemplateFieldsSurvive) {
  json j = MinimalJob();
  json& pod = j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"];
  pod["futureField"] = {{"nested", {1, 2.5, "x", nullptr}}};
  pod["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpu", 1}}}};
  pod["containers"][0]["securityContext"] = {{"runAsNonRoot", true}};
  FieldErrors errors;
  json out = EncodeTrainingJob(DecodeTrainingJob(j, &errors));
  ASSERT_TRUE(errors.empty());
  EXPECT_EQ(out["spec"]["replicaSpecs"]["Worker"]["template"]["spec"], pod);
}

TEST(TrainingJobJsonTest, TypedViewOfThePodTemplate) {
  json j = MinimalJob();
  json& containers = j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"];
  containers = json::array(
      {{{"name", "sidecar"}, {"image", "busybox"}},
       {{"name", "trainer"},
        {"image", "lockstep/trainer:0.1.0"},
        {"command", {"lockstep-trainer"}},
        {"ports",
         {{{"name", "lockstep"}, {"containerPort", 3333}},
          {{"name", "lockstep-metrics"}, {"containerPort", 9999}}}},
        {"env",
         {{{"name", "A"}, {"value", "1"}},
          {{"name", "B"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}}}}});
  j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["restartPolicy"] = "Always";
  FieldErrors errors;
  TrainingJob job = DecodeTrainingJob(j, &errors);
  ASSERT_TRUE(errors.empty());
  const PodTemplate& t = job.spec.replica_specs.at(ReplicaType::kWorker).pod_template;
  ASSERT_EQ(t.containers().size(), 2u);
  ASSERT_NE(t.TrainingContainer(), nullptr);
  EXPECT_EQ(t.TrainingContainer()->name, "trainer");
  EXPECT_EQ(t.TrainingPort(), 3333);
  EXPECT_EQ(t.MetricsPort(), 9999);
  EXPECT_EQ(t.restart_policy(), "Always");
  ASSERT_NE(t.TrainingContainer()->FindEnv("B"), nullptr);
  EXPECT_TRUE(t.TrainingContainer()->FindEnv("B")->from_source);
  EXPECT_EQ(t.TrainingContainer()->FindEnv("A")->value, "1");
  // Without named ports: the "tensorflow" container, and the default ports.
  const PodTemplate& chief = job.spec.replica_specs.at(ReplicaType::kChief).pod_template;
  EXPECT_EQ(chief.TrainingPort(), kDefaultTrainingPort);
  EXPECT_EQ(chief.MetricsPort(), kDefaultMetricsPort);
}

TEST(TrainingJobJsonTest, KubeflowPortNameIsTheTrainingPort) {
  json j = MinimalJob();
  j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
      json::array({{{"name", "tensorflow"},
                    {"image", "tensorflow/tensorflow"},
                    {"ports", {{{"name", "tfjob-port"}, {"containerPort", 2000}}}}}});
  FieldErrors errors;
  TrainingJob job = DecodeTrainingJob(j, &errors);
  ASSERT_TRUE(errors.empty());
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kWorker).pod_template.TrainingPort(), 2000);
}

TEST(TrainingJobJsonTest, StatusRoundTrips) {
  json j = MinimalJob();
  j["metadata"]["creationTimestamp"] = "2026-11-21T17:05:00Z";
  j["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  j["status"] = {{"conditions",
                  {{{"type", "Created"},
                    {"status", "True"},
                    {"reason", "TrainingJobCreated"},
                    {"message", "pods created"},
                    {"lastTransitionTime", "2026-11-21T17:05:01Z"},
                    {"observedGeneration", 1}}}},
                 {"state", "Running"},
                 {"replicaStatuses",
                  {{"Worker",
                    {{"active", 2},
                     {"ready", 2},
                     {"succeeded", 0},
                     {"failed", 0},
                     {"restarts", 1},
                     {"selector", "lockstep.io/job-name=job"}}}}},
                 {"ready", "3/3"},
                 {"restartCount", 1},
                 {"attempt", 2},
                 {"startTime", "2026-11-21T17:05:02Z"},
                 {"observedGeneration", 1},
                 {"progress",
                  {{"step", 450},
                   {"totalSteps", 1000},
                   {"epoch", 1},
                   {"loss", 0.25},
                   {"metrics", {{"accuracy", 0.875}}},
                   {"samplesPerSecond", 20123.5},
                   {"lastCheckpointStep", 400},
                   {"estimatedRemainingSeconds", 30},
                   {"updateTime", "2026-11-21T17:06:00Z"},
                   {"summary", "45% (450/1000)"}}}};
  FieldErrors errors;
  TrainingJob job = DecodeTrainingJob(j, &errors);
  ASSERT_TRUE(errors.empty()) << errors.front().ToString();
  ASSERT_TRUE(job.status.has_value());
  EXPECT_EQ(job.status->state, JobState::kRunning);
  EXPECT_EQ(job.status->replica_statuses.at(ReplicaType::kWorker).restarts, 1);
  EXPECT_EQ(job.status->progress->metrics.at("accuracy"), 0.875);
  json out = EncodeTrainingJob(job);
  EXPECT_EQ(out["status"], j["status"]);
  EXPECT_EQ(out["metadata"]["managedFields"], j["metadata"]["managedFields"]);
  EXPECT_EQ(out["metadata"]["creationTimestamp"], "2026-11-21T17:05:00Z");
}

// Malformed input: every case decodes without crashing and names the field.
class MalformedTest : public ::testing::TestWithParam<testing::ManifestCase> {};

TEST_P(MalformedTest, DecodingReportsTheField) {
  json j = MinimalJob();
  GetParam().mutate(j);
  FieldErrors errors;
  DecodeTrainingJob(j, &errors);
  ASSERT_FALSE(errors.empty());
  testing::ExpectErrorAt(errors, GetParam().path, GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    All, MalformedTest,
    ::testing::Values(
        testing::ManifestCase{"ReplicasString",
                      [](json& j) { j["spec"]["replicaSpecs"]["Worker"]["replicas"] = "two"; },
                      "spec.replicaSpecs.Worker.replicas",
                      "Invalid value: \"two\": must be of type integer"},
        testing::ManifestCase{"ReplicasFraction",
                      [](json& j) { j["spec"]["replicaSpecs"]["Worker"]["replicas"] = 1.5; },
                      "spec.replicaSpecs.Worker.replicas", "must be of type integer"},
        testing::ManifestCase{
            "ReplicasHuge",
            [](json& j) { j["spec"]["replicaSpecs"]["Worker"]["replicas"] = 99999999999LL; },
            "spec.replicaSpecs.Worker.replicas", "must be at most 2147483647"},
        testing::ManifestCase{"ReplicasHugeUnsigned",
                      [](json& j) {
                        j["spec"]["replicaSpecs"]["Worker"]["replicas"] = 18446744073709551615ULL;
                      },
                      "spec.replicaSpecs.Worker.replicas", "must be at most 2147483647"},
        testing::ManifestCase{"DeadlineHugeFloat",
                      [](json& j) {
                        j["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 1e300}};
                      },
                      "spec.runPolicy.activeDeadlineSeconds",
                      "must be at most 9223372036854775807"},
        testing::ManifestCase{"DeadlineInfinite",
                      [](json& j) {
                        j["spec"]["runPolicy"] = {
                            {"activeDeadlineSeconds", std::numeric_limits<double>::infinity()}};
                      },
                      "spec.runPolicy.activeDeadlineSeconds", "must be of type integer"},
        testing::ManifestCase{"UnknownReplicaType",
                      [](json& j) { j["spec"]["replicaSpecs"]["Master"] = testing::Replica(1); },
                      "spec.replicaSpecs.Master",
                      "Unsupported value: \"Master\": supported values: \"Chief\", \"Evaluator\", "
                      "\"PS\", \"Worker\""},
        testing::ManifestCase{"SpecIsArray", [](json& j) { j["spec"] = json::array(); }, "spec",
                      "must be of type object"},
        testing::ManifestCase{"ReplicaSpecsIsString", [](json& j) { j["spec"]["replicaSpecs"] = "Worker"; },
                      "spec.replicaSpecs", "must be of type object"},
        testing::ManifestCase{"SuspendIsString",
                      [](json& j) {
                        j["spec"]["runPolicy"] = {{"suspend", "yes"}};
                      },
                      "spec.runPolicy.suspend", "must be of type boolean"},
        testing::ManifestCase{"StrategyUnknown", [](json& j) { j["spec"]["strategy"] = "Horovod"; },
                      "spec.strategy", "Unsupported value: \"Horovod\""},
        testing::ManifestCase{
            "RestartPolicyUnknown",
            [](json& j) { j["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"; },
            "spec.replicaSpecs.Worker.restartPolicy", "Unsupported value"},
        testing::ManifestCase{"ContainersNotList",
                      [](json& j) {
                        j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
                            json::object();
                      },
                      "spec.replicaSpecs.Worker.template.spec.containers", "must be of type array"},
        testing::ManifestCase{
            "PortString",
            [](json& j) {
              j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = {
                  {{"containerPort", "80"}}};
            },
            "spec.replicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",
            "must be of type integer"},
        testing::ManifestCase{"UnknownSpecField",
                      [](json& j) { j["spec"]["tfReplicaSpecs"] = json::object(); },
                      "spec.tfReplicaSpecs", "Unknown field"},
        testing::ManifestCase{"WrongKind", [](json& j) { j["kind"] = "TFJob"; }, "kind",
                      "Unsupported value: \"TFJob\""},
        testing::ManifestCase{"LabelsNotStrings",
                      [](json& j) {
                        j["metadata"]["labels"] = {{"a", 1}};
                      },
                      "metadata.labels[a]", "must be of type string"},
        testing::ManifestCase{"BadTimestamp",
                      [](json& j) { j["metadata"]["creationTimestamp"] = "yesterday"; },
                      "metadata.creationTimestamp", "must be an RFC 3339 time"},
        testing::ManifestCase{"ExitCodeOutOfRange",
                      [](json& j) {
                        j["spec"]["failurePolicy"] = {
                            {"rules",
                             {{{"action", "FailJob"},
                               {"onExitCodes", {{"operator", "In"}, {"values", {256}}}}}}}};
                      },
                      "spec.failurePolicy.rules[0].onExitCodes.values[0]", "must be at most 255"},
        testing::ManifestCase{"RootNotObject", [](json& j) { j = json("TrainingJob"); }, "<root>",
                      "must be of type object"}),
    [](const auto& p) { return p.param.name; });

TEST(TrainingJobJsonTest, UnknownFieldsCanBeTolerated) {
  json j = MinimalJob();
  j["spec"]["futureFeature"] = true;
  FieldErrors errors;
  DecodeTrainingJob(j, &errors, DecodeOptions{.reject_unknown_fields = false});
  EXPECT_TRUE(errors.empty());
}

TEST(TrainingJobJsonTest, ReportsEveryProblemAtOnce) {
  json j = MinimalJob();
  j["spec"]["replicaSpecs"]["Worker"]["replicas"] = "x";
  j["spec"]["strategy"] = "Nope";
  j["spec"]["runPolicy"] = {{"backoffLimit", true}};
  FieldErrors errors;
  DecodeTrainingJob(j, &errors);
  EXPECT_EQ(errors.size(), 3u);
}

}  // namespace
}  // namespace lockstep::api
