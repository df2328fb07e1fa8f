#include "operator/trainingjob/observed.h"

#include <gtest/gtest.h>

#include "operator/trainingjob/observe.h"
#include "operator/trainingjob/reconciler.h"

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
  EXPECT_EQ(pod->metadata.name(), "t-worker-0");
  EXPECT_EQ(pod->phase, PodPhase::kFailed);
  EXPECT_EQ(pod->why().reason, "Evicted");
  EXPECT_EQ(pod->pod_ip, "10.0.0.7");
  EXPECT_TRUE(pod->disruption_target);
  EXPECT_FALSE(pod->ready);
  EXPECT_FALSE(pod->unschedulable);
  EXPECT_FALSE(pod->containers_running);
  EXPECT_EQ(pod->restarts, 2);
  // The container terminated with 137: its state, not the last state, says how it failed.
  ASSERT_TRUE(pod->why().failure.has_value());
  EXPECT_EQ(pod->why().failure->kind, ContainerState::Kind::kTerminated);
  EXPECT_EQ(pod->why().failure->exit_code, 137);
  EXPECT_EQ(pod->why().failure->message, "m");
  EXPECT_FALSE(DecodeObservedPod(nlohmann::json::array()).ok());
}

TEST(ObservedTest, APendingPodSaysWhyItIsNotScheduled) {
  absl::StatusOr<ObservedPod> pod = DecodeObservedPod(nlohmann::json::parse(R"({
    "metadata": {"name": "t-worker-0"},
    "status": {"phase": "Pending", "conditions": [
      {"type": "Ready", "status": "False"},
      {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
       "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}})"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_FALSE(pod->ready);
  EXPECT_TRUE(pod->unschedulable);
  EXPECT_EQ(pod->why().unschedulable_message,
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.");

  pod = DecodeObservedPod(nlohmann::json::parse(R"({
    "metadata": {"name": "t-worker-0"},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
      {"type": "PodScheduled", "status": "True"}]}})"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_TRUE(pod->ready);
  EXPECT_FALSE(pod->unschedulable);
}

TEST(ObservedTest, AChildsPackedStringsReadBackAndCopyAsValues) {
  ChildMeta m({.namespace_ = "ns",
               .name = "t-worker-0",
               .uid = "u0",
               .resource_version = "5",
               .controller_uid = "job-uid",
               .controller_job = "t"});
  m.replica_index = 0;
  EXPECT_EQ(m.key(), "ns/t-worker-0");
  EXPECT_EQ(m.name(), "t-worker-0");
  EXPECT_EQ(m.namespace_(), "ns");
  EXPECT_EQ(m.controller_job(), "t");

  ChildMeta copy = m;  // a copy owns its characters
  ChildMeta::Strings s = m.strings();
  s.uid = "u1";
  s.name = m.name().substr(0, 1);  // views of the object's own characters
  m.Set(s);
  EXPECT_EQ(m.key(), "ns/t");
  EXPECT_EQ(m.uid(), "u1");
  EXPECT_EQ(m.resource_version(), "5");
  EXPECT_EQ(m.replica_index, 0);  // Set replaces the strings only
  EXPECT_EQ(copy.key(), "ns/t-worker-0");
  EXPECT_EQ(copy.uid(), "u0");
  copy = m;
  EXPECT_EQ(copy.uid(), "u1");
  ChildMeta moved = std::move(copy);
  EXPECT_EQ(moved.key(), "ns/t");
  EXPECT_EQ(moved.replica_index, 0);
  EXPECT_EQ(copy.key(), "");  // NOLINT(bugprone-use-after-move): a moved-from one is empty
  EXPECT_EQ(copy.uid(), "");  // NOLINT(bugprone-use-after-move)

  ChildMeta cluster_scoped({.name = "pg"});  // no namespace: the key is the name
  EXPECT_EQ(cluster_scoped.key(), "pg");
  EXPECT_EQ(cluster_scoped.namespace_(), "");
  EXPECT_EQ(cluster_scoped.uid(), "");
  EXPECT_EQ(ChildMeta().key(), "");
  EXPECT_EQ(ChildMeta(ChildMeta()).name(), "");
}

// A child's metadata is kept as the planner reads it: labels parsed, the controlling owner.
TEST(ObservedTest, AChildsMetadataIsParsedOnceWhereItComesIn) {
  nlohmann::json j = nlohmann::json::parse(R"({"metadata": {
    "name": "t-worker-2", "namespace": "ns", "uid": "u2", "resourceVersion": "17",
    "creationTimestamp": "2026-11-21T10:00:00Z", "deletionTimestamp": "2026-11-21T10:05:00Z",
    "labels": {"lockstep.io/job-name": "t", "lockstep.io/replica-type": "worker",
               "lockstep.io/replica-index": "2", "lockstep.io/attempt": "3", "team": "a"},
    "annotations": {"note": "dropped"},
    "ownerReferences": [
      {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "cm-uid"},
      {"apiVersion": "lockstep.io/v1alpha1", "kind": "TrainingJob", "name": "t",
       "uid": "job-uid", "controller": true}]}})");
  absl::StatusOr<ObjectHeader> h = DecodeObjectHeader(j);
  ASSERT_TRUE(h.ok()) << h.status();
  const ChildMeta& m = h->metadata;
  EXPECT_EQ(m.name(), "t-worker-2");
  EXPECT_EQ(m.namespace_(), "ns");
  EXPECT_EQ(m.uid(), "u2");
  EXPECT_EQ(m.resource_version(), "17");
  EXPECT_EQ(m.creation_timestamp, absl::FromUnixSeconds(1795255200));
  EXPECT_EQ(m.deletion_timestamp, absl::FromUnixSeconds(1795255500));
  EXPECT_EQ(m.replica_type, api::ReplicaType::kWorker);
  EXPECT_EQ(m.replica_index, 2);
  EXPECT_EQ(m.attempt, 3);
  EXPECT_EQ(m.controller_uid(), "job-uid");
  EXPECT_EQ(m.controller_job(), "t");
  EXPECT_EQ(KeyOf(m), "ns/t-worker-2");
  EXPECT_EQ(OwnerUids(m), std::vector<std::string>{"job-uid"});
  EXPECT_EQ(ControllerKey(m), "ns/t");

  // Labels that are not a replica's: the planner deletes such a pod.
  j["metadata"]["labels"] = {{"lockstep.io/replica-type", "Worker"},
                             {"lockstep.io/replica-index", "-1"},
                             {"lockstep.io/attempt", "x"}};
  // Controlled by something else: indexed under its owner, but no job's key.
  j["metadata"]["ownerReferences"] = {{{"apiVersion", "apps/v1"},
                                       {"kind", "ReplicaSet"},
                                       {"name", "rs"},
                                       {"uid", "rs-uid"},
                                       {"controller", true}}};
  h = DecodeObjectHeader(j);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->metadata.replica_type, std::nullopt);
  EXPECT_EQ(h->metadata.replica_index, -1);
  EXPECT_EQ(h->metadata.attempt, -1);
  EXPECT_EQ(h->metadata.controller_uid(), "rs-uid");
  EXPECT_EQ(h->metadata.controller_job(), "");
  EXPECT_EQ(ControllerKey(h->metadata), "");

  // Owned by a job, but not controlled: nobody's child.
  j["metadata"]["ownerReferences"] = {{{"apiVersion", "lockstep.io/v1alpha1"},
                                       {"kind", "TrainingJob"},
                                       {"name", "t"},
                                       {"uid", "job-uid"}}};
  h = DecodeObjectHeader(j);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(OwnerUids(h->metadata).empty());
  EXPECT_EQ(ControllerKey(h->metadata), "");
  EXPECT_FALSE(DecodeObjectHeader(nlohmann::json::parse(R"({"metadata": {}})")).ok());
}

}  // namespace
TEST(ObservedTest, APodKeepsOfItsContainersOnlyWhatThePlannerReads) {
  auto decode = [](const char* containers) {
    return *DecodeObservedPod(nlohmann::json::parse(
        std::string(R"({"metadata": {"name": "t-worker-0"}, "status": {"phase": "Running",
                       "podIP": "10.0.0.7", "containerStatuses": )") +
        containers + "}}"));
  };
  // Running, never restarted: nothing out of line.
  ObservedPod running = decode(R"([{"name": "a", "state": {"running": {}}},
                                    {"name": "b", "state": {"running": {}}}])");
  EXPECT_TRUE(running.containers_running);
  EXPECT_EQ(running.restarts, 0);
  EXPECT_EQ(running.detail, nullptr);
  EXPECT_EQ(running.why(), PodDetail{});

  // Restarted in place: the container that restarted most speaks, by its last state.
  ObservedPod restarted = decode(R"([
    {"name": "a", "restartCount": 1, "state": {"running": {}},
     "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}},
    {"name": "b", "restartCount": 4, "state": {"running": {}},
     "lastState": {"terminated": {"exitCode": 42, "reason": "OOMKilled"}}}])");
  EXPECT_TRUE(restarted.containers_running);
  EXPECT_EQ(restarted.restarts, 5);
  ASSERT_TRUE(restarted.why().failure.has_value());
  EXPECT_EQ(restarted.why().failure->exit_code, 42);
  EXPECT_EQ(restarted.why().failure->reason, "OOMKilled");

  // One waits with a reason, one exited 0: the first says why, nothing failed.
  ObservedPod waiting = decode(R"([
    {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
    {"name": "b", "state": {"waiting": {"reason": "ErrImagePull", "message": "no such image"}}},
    {"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}])");
  EXPECT_FALSE(waiting.containers_running);
  EXPECT_EQ(waiting.why().waiting.reason, "ErrImagePull");
  EXPECT_EQ(waiting.why().waiting.message, "no such image");
  EXPECT_FALSE(waiting.why().failure.has_value());

  // A copy shares the detail until it is changed.
  ObservedPod copy = restarted;
  EXPECT_EQ(copy.detail, restarted.detail);
  copy.mutable_detail().reason = "Evicted";
  EXPECT_NE(copy.detail, restarted.detail);
  EXPECT_EQ(restarted.why().reason, "");
  EXPECT_EQ(copy.why().failure, restarted.why().failure);
}

}  // namespace lockstep::trainingjob
