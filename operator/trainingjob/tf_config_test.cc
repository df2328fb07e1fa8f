// Golden tests: TF_CONFIG byte-equal to the Kubeflow TFJob v1 form (DESIGN section 3).
#include "operator/trainingjob/tf_config.h"

#include <gtest/gtest.h>

#include "operator/api/trainingjob_json.h"
#include "operator/trainingjob/testing.h"

namespace lockstep::trainingjob {
namespace {

using api::ReplicaType;
using testing::Job;

api::TrainingJob InNamespace(api::TrainingJob job, const std::string& ns) {
  job.metadata.namespace_ = ns;
  return job;
}

TEST(TfConfigTest, DesignGoldenExample) {
  api::TrainingJob job =
      InNamespace(Job("ParameterServer", {{"PS", 1}, {"Worker", 1}, {"Evaluator", 1}}), "ns3");
  EXPECT_EQ(
      BuildTfConfig(job, ReplicaType::kWorker, 0),
      R"({"cluster":{"evaluator":["t-evaluator-0.ns3.svc:2222"],"ps":["t-ps-0.ns3.svc:2222"],"worker":["t-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"})");
}

TEST(TfConfigTest, ChiefWorkerPsEvaluatorEachSeeTheirTask) {
  api::TrainingJob job =
      Job("ParameterServer", {{"Chief", 1}, {"Worker", 2}, {"PS", 2}, {"Evaluator", 1}});
  const std::string cluster =
      R"({"cluster":{"chief":["t-chief-0.ns.svc:2222"],"evaluator":["t-evaluator-0.ns.svc:2222"],"ps":["t-ps-0.ns.svc:2222","t-ps-1.ns.svc:2222"],"worker":["t-worker-0.ns.svc:2222","t-worker-1.ns.svc:2222"]},)";
  EXPECT_EQ(BuildTfConfig(job, ReplicaType::kChief, 0),
            cluster + R"("task":{"type":"chief","index":0},"environment":"cloud"})");
  EXPECT_EQ(BuildTfConfig(job, ReplicaType::kWorker, 1),
            cluster + R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ(BuildTfConfig(job, ReplicaType::kPS, 1),
            cluster + R"("task":{"type":"ps","index":1},"environment":"cloud"})");
  EXPECT_EQ(BuildTfConfig(job, ReplicaType::kEvaluator, 0),
            cluster + R"("task":{"type":"evaluator","index":0},"environment":"cloud"})");
}

TEST(TfConfigTest, ClusterDomainFromTheJobOrTheOperator) {
  api::TrainingJob job = Job("MultiWorkerMirrored", {{"Worker", 2}});
  const std::string with_domain =
      R"({"cluster":{"worker":["t-worker-0.ns.svc.cluster.local:2222","t-worker-1.ns.svc.cluster.local:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"})";
  EXPECT_EQ(BuildTfConfig(job, ReplicaType::kWorker, 1, "cluster.local"), with_domain);
  job.spec.tf_config.cluster_domain = "cluster.local";
  EXPECT_EQ(BuildTfConfig(job, ReplicaType::kWorker, 1, "ignored.example"), with_domain);
}

TEST(TfConfigTest, EvaluatorExcludedWhenAsked) {
  api::TrainingJob job = Job("ParameterServer", {{"PS", 1}, {"Worker", 1}, {"Evaluator", 1}},
                             {{"tfConfig", {{"includeEvaluator", false}}}});
  EXPECT_EQ(
      BuildTfConfig(job, ReplicaType::kPS, 0),
      R"({"cluster":{"ps":["t-ps-0.ns.svc:2222"],"worker":["t-worker-0.ns.svc:2222"]},"task":{"type":"ps","index":0},"environment":"cloud"})");
}

TEST(TfConfigTest, SingleReplicaJobGetsNone) {
  EXPECT_EQ(BuildTfConfig(Job("OneDevice", {{"Worker", 1}}), ReplicaType::kWorker, 0),
            std::nullopt);
  // One chief plus one worker is two replicas: injected.
  EXPECT_NE(BuildTfConfig(Job("", {{"Chief", 1}, {"Worker", 1}}), ReplicaType::kChief, 0),
            std::nullopt);
}

TEST(TfConfigTest, CustomPortNamedLockstepOrTfjobPort) {
  nlohmann::json j = testing::JobJson("MultiWorkerMirrored", {{"Worker", 2}});
  nlohmann::json port = {{"name", "tfjob-port"}, {"containerPort", 3333}};
  j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] =
      nlohmann::json::array({port});
  api::FieldErrors errors;
  api::TrainingJob job = api::DecodeTrainingJob(j, &errors);
  ASSERT_TRUE(errors.empty());
  EXPECT_EQ(
      BuildTfConfig(job, ReplicaType::kWorker, 0),
      R"({"cluster":{"worker":["t-worker-0.ns.svc:3333","t-worker-1.ns.svc:3333"]},"task":{"type":"worker","index":0},"environment":"cloud"})");
}

}  // namespace
}  // namespace lockstep::trainingjob
