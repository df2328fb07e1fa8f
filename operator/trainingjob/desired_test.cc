#include "operator/trainingjob/desired.h"

#include <gtest/gtest.h>

#include "operator/api/trainingjob_json.h"
#include "operator/trainingjob/testing.h"

namespace lockstep::trainingjob {
namespace {

using api::ReplicaType;
using nlohmann::json;
using testing::Job;

const json* FindEnv(const json& pod, const std::string& name) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == name) return &e;
  }
  return nullptr;
}

TEST(DesiredPodTest, NamesLabelsOwnerAndRestartPolicy) {
  api::TrainingJob job = Job("MultiWorkerMirrored", {{"Worker", 2, "ExitCode"}});
  json pod = DesiredPod(job, ReplicaType::kWorker, 1, 3, {});
  EXPECT_EQ(pod["metadata"]["name"], "t-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "ns");
  EXPECT_EQ(pod["metadata"]["labels"]["lockstep.io/job-name"], "t");
  EXPECT_EQ(pod["metadata"]["labels"]["lockstep.io/replica-type"], "worker");
  EXPECT_EQ(pod["metadata"]["labels"]["lockstep.io/replica-index"], "1");
  EXPECT_EQ(pod["metadata"]["labels"]["lockstep.io/attempt"], "3");
  const json& owner = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["uid"], "job-uid");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");  // ExitCode: the operator decides
  EXPECT_EQ(pod["spec"]["containers"][0]["ports"][0]["name"], "lockstep");
  EXPECT_EQ(pod["spec"]["containers"][0]["ports"][0]["containerPort"], 2222);
}

TEST(DesiredPodTest, RestartPolicyMapping) {
  EXPECT_EQ(PodRestartPolicy(api::RestartPolicy::kAlways), "Always");
  EXPECT_EQ(PodRestartPolicy(api::RestartPolicy::kOnFailure), "OnFailure");
  EXPECT_EQ(PodRestartPolicy(api::RestartPolicy::kNever), "Never");
  EXPECT_EQ(PodRestartPolicy(api::RestartPolicy::kExitCode), "Never");
}

TEST(DesiredPodTest, InjectedEnvironment) {
  api::TrainingJob job = Job("MultiWorkerMirrored", {{"Chief", 1}, {"Worker", 2}});
  json pod = DesiredPod(job, ReplicaType::kWorker, 0, 2, {.cluster_domain = "cluster.local"});
  ASSERT_NE(FindEnv(pod, "TF_CONFIG"), nullptr);
  EXPECT_EQ(
      (*FindEnv(pod, "TF_CONFIG"))["value"],
      R"({"cluster":{"chief":["t-chief-0.ns.svc.cluster.local:2222"],"worker":["t-worker-0.ns.svc.cluster.local:2222","t-worker-1.ns.svc.cluster.local:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"})");
  EXPECT_EQ((*FindEnv(pod, "LOCKSTEP_JOB_NAME"))["value"], "t");
  EXPECT_EQ((*FindEnv(pod, "LOCKSTEP_NAMESPACE"))["value"], "ns");
  EXPECT_EQ((*FindEnv(pod, "LOCKSTEP_REPLICA_TYPE"))["value"], "worker");
  EXPECT_EQ((*FindEnv(pod, "LOCKSTEP_REPLICA_INDEX"))["value"], "0");
  EXPECT_EQ((*FindEnv(pod, "LOCKSTEP_STRATEGY"))["value"], "MultiWorkerMirrored");
  EXPECT_EQ((*FindEnv(pod, "LOCKSTEP_ATTEMPT"))["value"], "2");
  EXPECT_EQ((*FindEnv(pod, "LOCKSTEP_POD_IP"))["valueFrom"]["fieldRef"]["fieldPath"],
            "status.podIP");
  const json& token = (*FindEnv(pod, "LOCKSTEP_JOB_TOKEN"))["valueFrom"]["secretKeyRef"];
  EXPECT_EQ(token["name"], "t-token");
  EXPECT_EQ(token["key"], "token");
}

TEST(DesiredPodTest, SingleReplicaHasNoTfConfig) {
  json pod = DesiredPod(Job("OneDevice", {{"Worker", 1}}), ReplicaType::kWorker, 0, 0, {});
  EXPECT_EQ(FindEnv(pod, "TF_CONFIG"), nullptr);
  EXPECT_NE(FindEnv(pod, "LOCKSTEP_JOB_TOKEN"), nullptr);
}

TEST(DesiredPodTest, UserVariableIsKeptAndReported) {
  json j = testing::JobJson("MultiWorkerMirrored", {{"Worker", 2}});
  json user = {{"name", "TF_CONFIG"}, {"value", "mine"}};
  j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] =
      json::array({user});
  j["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"]["labels"]["team"] = "vision";
  api::FieldErrors errors;
  api::TrainingJob job = api::DecodeTrainingJob(j, &errors);
  ASSERT_TRUE(errors.empty());
  std::vector<std::string> kept;
  json pod = DesiredPod(job, ReplicaType::kWorker, 0, 0, {}, &kept);
  EXPECT_EQ((*FindEnv(pod, "TF_CONFIG"))["value"], "mine");
  EXPECT_EQ(kept, std::vector<std::string>{"TF_CONFIG"});
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "vision");  // template labels survive
}

TEST(DesiredPodTest, GangSchedulers) {
  api::TrainingJob job =
      Job("MultiWorkerMirrored", {{"Worker", 3}},
          {{"runPolicy", {{"schedulingPolicy", {{"minAvailable", 2}, {"queue", "q1"}}}}}});
  json v = DesiredPod(job, ReplicaType::kWorker, 0, 0, {.gang = GangScheduler::kVolcano});
  EXPECT_EQ(v["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(v["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "t");
  json pg = DesiredPodGroup(job, GangScheduler::kVolcano);
  EXPECT_EQ(pg["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(pg["spec"]["minMember"], 2);
  EXPECT_EQ(pg["spec"]["queue"], "q1");

  json s = DesiredPod(job, ReplicaType::kWorker, 0, 0, {.gang = GangScheduler::kSchedulerPlugins});
  EXPECT_EQ(s["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "t");
  json pg2 = DesiredPodGroup(Job("MultiWorkerMirrored", {{"Worker", 3}}),
                             GangScheduler::kSchedulerPlugins);
  EXPECT_EQ(pg2["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(pg2["spec"]["minMember"], 3);  // every replica when minAvailable is unset
}

TEST(DesiredServiceTest, HeadlessPerPodWithNotReadyAddresses) {
  json svc = DesiredService(Job("MultiWorkerMirrored", {{"Worker", 2}}), ReplicaType::kWorker, 1);
  EXPECT_EQ(svc["metadata"]["name"], "t-worker-1");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"]["lockstep.io/replica-index"], "1");
  EXPECT_FALSE(svc["spec"]["selector"].contains("lockstep.io/attempt"));
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 2222);
}

TEST(DesiredSecretTest, TokenIsBase64AndOwned) {
  json s = DesiredTokenSecret(Job("OneDevice", {{"Worker", 1}}), "abc");
  EXPECT_EQ(s["metadata"]["name"], "t-token");
  EXPECT_EQ(s["data"]["token"], "YWJj");
  EXPECT_EQ(s["metadata"]["ownerReferences"][0]["uid"], "job-uid");
}

}  // namespace
}  // namespace lockstep::trainingjob
