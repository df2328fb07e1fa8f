#include "operator/trainingjob/observed.h"

#include <gtest/gtest.h>

#include "operator/trainingjob/observe.h"

namespace lockstep::trainingjob {
namespace {

TEST(ObservedTest, PodPhasesParseOnceAndRoundTrip) {
  for (PodPhase p : {PodPhase::kUnknown, PodPhase::kPending, PodPhase::kRunning,
                     PodPhase::kSucceeded, PodPhase::kFailed}) {
    EXPECT_EQ(ParsePodPhase(PodPhaseName(p)), p);
  }
  EXPECT_EQ(ParsePodPhase("Running"), PodPhase::kRunning);
  EXPECT_EQ(ParsePodPhase(""), PodPhase::kUnknown);
  EXPECT_EQ(ParsePodPhase("running"), PodPhase::kUnknown);  // the API's spelling only
}

TEST(ObservedTest, ChildKindsNameTheirResources) {
  EXPECT_EQ(ChildKindPlural(ChildKind::kPod), "pods");
  EXPECT_EQ(ChildKindPlural(ChildKind::kService), "services");
  EXPECT_EQ(ChildKindPlural(ChildKind::kSecret), "secrets");
  EXPECT_EQ(ChildKindPlural(ChildKind::kPodGroup), "podgroups");
  EXPECT_EQ(ChildKindPlural(ChildKind::kTrainingJob), "trainingjobs");
  for (ChildKind k :
       {ChildKind::kPod, ChildKind::kService, ChildKind::kSecret, ChildKind::kTrainingJob}) {
    EXPECT_EQ(ResourceOf(k, GangScheduler::kNone).plural, ChildKindPlural(k));
  }
  EXPECT_EQ(ResourceOf(ChildKind::kPodGroup, GangScheduler::kVolcano).ApiVersion(),
            "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(ResourceOf(ChildKind::kPodGroup, GangScheduler::kSchedulerPlugins).ApiVersion(),
            "scheduling.x-k8s.io/v1alpha1");
}

TEST(ObservedTest, ThePodInformersDecoderTypesThePod) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "metadata": {"name": "t-worker-0", "namespace": "ns", "uid": "u1"},
    "status": {
      "phase": "Failed", "reason": "Evicted", "podIP": "10.0.0.7",
      "conditions": [{"type": "DisruptionTarget", "status": "True"}],
      "containerStatuses": [{"name": "tensorflow", "restartCount": 2,
        "state": {"terminated": {"exitCode": 137, "reason": "Error", "message": "m"}},
        "lastState": {"terminated": {"exitCode": 1}}}]}})");
  absl::StatusOr<ObservedPod> pod = DecodeObservedPod(j);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->metadata.name, "t-worker-0");
  EXPECT_EQ(pod->phase, PodPhase::kFailed);
  EXPECT_EQ(pod->reason, "Evicted");
  EXPECT_EQ(pod->pod_ip, "10.0.0.7");
  EXPECT_TRUE(pod->ConditionTrue("DisruptionTarget"));
  EXPECT_FALSE(pod->ConditionTrue("Ready"));
  ASSERT_EQ(pod->container_statuses.size(), 1u);
  const ContainerStatus& c = pod->container_statuses[0];
  EXPECT_EQ(c.restart_count, 2);
  EXPECT_EQ(c.state.kind, ContainerState::Kind::kTerminated);
  EXPECT_EQ(c.state.exit_code, 137);
  EXPECT_EQ(c.state.message, "m");
  EXPECT_EQ(c.last_state.kind, ContainerState::Kind::kTerminated);
  EXPECT_EQ(c.last_state.exit_code, 1);
  EXPECT_FALSE(DecodeObservedPod(nlohmann::json::array()).ok());
}

}  // namespace
}  // namespace lockstep::trainingjob
