#include "operator/kube/pod.h"

#include <gtest/gtest.h>

namespace lockstep::kube {
namespace {

TEST(PodTest, DecodesWhatTheOperatorReads) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "kind": "Pod",
    "metadata": {"name": "j-worker-0", "namespace": "ml", "uid": "u", "resourceVersion": "12",
                 "labels": {"lockstep.io/job-name": "j"},
                 "ownerReferences": [{"apiVersion": "lockstep.io/v1alpha1", "kind": "TrainingJob",
                                      "name": "j", "uid": "owner", "controller": true}],
                 "managedFields": [{"manager": "kubelet"}]},
    "spec": {"nodeName": "n1", "restartPolicy": "Never", "hostname": "j-worker-0",
             "subdomain": "j", "containers": [{"name": "lockstep", "image": "x"}]},
    "status": {
      "phase": "Failed", "podIP": "10.1.2.3", "startTime": "2026-11-21T10:00:00Z",
      "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
      "containerStatuses": [{
        "name": "lockstep", "ready": false, "restartCount": 2,
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                 "message": "{\"reason\":\"PeerLost\"}",
                                 "finishedAt": "2026-11-21T10:05:00Z"}},
        "lastState": {"terminated": {"exitCode": 1}}}]}})");
  absl::StatusOr<Pod> pod = DecodePod(j);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->metadata.name, "j-worker-0");
  EXPECT_EQ(pod->metadata.owner_references.at(0).uid, "owner");
  EXPECT_TRUE(pod->metadata.other.empty());  // managedFields are not kept
  EXPECT_EQ(pod->node_name, "n1");
  EXPECT_EQ(pod->phase, "Failed");
  EXPECT_EQ(pod->pod_ip, "10.1.2.3");
  ASSERT_NE(pod->Condition("DisruptionTarget"), nullptr);
  EXPECT_EQ(pod->Condition("DisruptionTarget")->reason, "EvictionByEvictionAPI");
  ASSERT_EQ(pod->container_statuses.size(), 1u);
  const ContainerStatus& cs = pod->container_statuses[0];
  EXPECT_EQ(cs.restart_count, 2);
  EXPECT_EQ(cs.state.kind, ContainerState::Kind::kTerminated);
  EXPECT_EQ(cs.state.exit_code, 137);
  EXPECT_EQ(cs.state.reason, "OOMKilled");
  EXPECT_EQ(cs.state.message, "{\"reason\":\"PeerLost\"}");
  EXPECT_EQ(cs.last_state.exit_code, 1);
}

TEST(PodTest, ToleratesOddFieldsButNeedsAName) {
  EXPECT_FALSE(DecodePod(nlohmann::json::array()).ok());
  EXPECT_FALSE(DecodePod({{"metadata", {{"namespace", "x"}}}}).ok());
  absl::StatusOr<Pod> odd = DecodePod(nlohmann::json::parse(
      R"({"metadata":{"name":"p"},"spec":7,"status":{"phase":3,"conditions":[1,{"type":"Ready"}],
          "containerStatuses":"x"}})"));
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->phase, "");
  EXPECT_EQ(odd->conditions.size(), 1u);
}

}  // namespace
}  // namespace lockstep::kube
