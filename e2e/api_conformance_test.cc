// API conformance: every semantic of the local API server, driven in-process and over raw
// HTTP (the same test runs both ways).
#include <filesystem>

#include "e2e/api_conformance_fixture.h"

namespace lockstep::local {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

using conformance::Answer;
using conformance::ApiServerTest;
using conformance::kJobs;
using conformance::kPods;

INSTANTIATE_TEST_SUITE_P(InProcessAndOverHttp, ApiServerTest, ::testing::Bool(),
                         conformance::ParamName);

TEST_P(ApiServerTest, Discovery) {
  EXPECT_EQ(Call("GET", "/version").body["major"], "1");
  EXPECT_EQ(Call("GET", "/api").body["versions"][0], "v1");
  Answer core = Call("GET", "/api/v1");
  ASSERT_EQ(core.status, 200);
  bool pods = false, pod_status = false;
  for (const json& r : core.body["resources"]) {
    pods |= r["name"] == "pods" && r["namespaced"] == true && r["kind"] == "Pod";
    pod_status |= r["name"] == "pods/status";
  }
  EXPECT_TRUE(pods && pod_status);
  InstallCrd();
  Answer groups = Call("GET", "/apis");
  EXPECT_THAT(groups.body.dump(), HasSubstr("lockstep.io/v1alpha1"));
  Answer lockstep = Call("GET", "/apis/lockstep.io/v1alpha1");
  ASSERT_EQ(lockstep.status, 200);
  EXPECT_THAT(lockstep.body.dump(), HasSubstr("trainingjobs/scale"));
  EXPECT_EQ(Call("GET", "/apis/nothing.io/v1").status, 404);
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
}

TEST_P(ApiServerTest, CreateGetListAndNotFoundLikeKubernetes) {
  Answer created = Call("POST", kPods, Pod("web-0"));
  ASSERT_EQ(created.status, 201) << created.body.dump();
  const json& meta = created.body["metadata"];
  EXPECT_EQ(meta["namespace"], "default");
  EXPECT_FALSE(meta["uid"].get<std::string>().empty());
  EXPECT_FALSE(meta["resourceVersion"].get<std::string>().empty());
  EXPECT_EQ(created.body["status"]["phase"], "Pending");
  EXPECT_EQ(Call("GET", std::string(kPods) + "/web-0").body["metadata"]["uid"], meta["uid"]);
  Answer missing = Call("GET", std::string(kPods) + "/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body["kind"], "Status");
  EXPECT_EQ(missing.body["reason"], "NotFound");
  EXPECT_EQ(missing.body["message"], "pods \"nope\" not found");
  Answer again = Call("POST", kPods, Pod("web-0"));
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(again.body["reason"], "AlreadyExists");
  Answer list = Call("GET", kPods);
  EXPECT_EQ(list.body["kind"], "PodList");
  EXPECT_EQ(list.body["items"].size(), 1u);
  EXPECT_EQ(Call("GET", "/api/v1/pods").body["items"].size(), 1u);  // all namespaces
  json generated = Pod("");
  generated["metadata"].erase("name");
  generated["metadata"]["generateName"] = "web-";
  Answer g = Call("POST", kPods, generated);
  ASSERT_EQ(g.status, 201);
  EXPECT_THAT(g.body["metadata"]["name"].get<std::string>(), ::testing::StartsWith("web-"));
}

TEST_P(ApiServerTest, BadRequestsGetKubernetesStyleAnswers) {
  EXPECT_EQ(Call("POST", kPods, json("{not json")).status, 400);
  EXPECT_EQ(Call("POST", kPods, json("[1,2]")).status, 400);
  json wrong_kind = Pod("x");
  wrong_kind["kind"] = "Service";
  Answer k = Call("POST", kPods, wrong_kind);
  EXPECT_EQ(k.status, 400);
  EXPECT_THAT(k.body["message"].get<std::string>(), HasSubstr("this endpoint takes Pod"));
  Answer bad_name = Call("POST", kPods, Pod("Bad_Name"));
  ASSERT_EQ(bad_name.status, 422);
  EXPECT_EQ(bad_name.body["reason"], "Invalid");
  EXPECT_EQ(bad_name.body["details"]["causes"][0]["field"], "metadata.name");
  EXPECT_THAT(bad_name.body["message"].get<std::string>(),
              HasSubstr("Pod \"Bad_Name\" is invalid"));
  json no_containers = Pod("x");
  no_containers["spec"] = json::object();
  EXPECT_EQ(Call("POST", kPods, no_containers).status, 422);
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/ghost/pods", Pod("x")).status, 404);
  EXPECT_EQ(Call("GET", "/api/v1/widgets").status, 404);
  EXPECT_EQ(Call("GET", "/nothing/here").status, 404);
  EXPECT_EQ(Call("POST", kPods, json(std::string(4 << 20, ' '))).status, 413);
  EXPECT_EQ(Call("GET", std::string(kPods) + "?labelSelector=a%20in").status, 400);
  EXPECT_EQ(Call("GET", std::string(kPods) + "?watch=true&resourceVersion=abc").status, 400);
  EXPECT_EQ(Call("GET", std::string(kPods) + "/x/exec").status, 404);
}

TEST_P(ApiServerTest, StaleUpdatesConflict) {
  json pod = Call("POST", kPods, Pod("a")).body;
  json first = pod;
  first["metadata"]["labels"]["v"] = "1";
  ASSERT_EQ(Call("PUT", std::string(kPods) + "/a", first).status, 200);
  json stale = pod;
  stale["metadata"]["labels"]["v"] = "2";
  Answer conflict = Call("PUT", std::string(kPods) + "/a", stale);
  EXPECT_EQ(conflict.status, 409);
  EXPECT_EQ(conflict.body["reason"], "Conflict");
  EXPECT_THAT(conflict.body["message"].get<std::string>(),
              HasSubstr("the object has been modified"));
  json renamed = pod;
  renamed["metadata"]["name"] = "b";
  EXPECT_EQ(Call("PUT", std::string(kPods) + "/a", renamed).status, 400);
  EXPECT_EQ(Call("PUT", std::string(kPods) + "/zzz", Pod("zzz")).status, 404);
}

TEST_P(ApiServerTest, CustomResourcesAreDefaultedPrunedAndValidated) {
  InstallCrd();
  json job = Job("mnist");
  job["spec"]["notAField"] = 1;
  Answer created = Call("POST", kJobs, job);
  ASSERT_EQ(created.status, 201) << created.body.dump();
  EXPECT_FALSE(created.body["spec"].contains("notAField"));  // pruned
  EXPECT_EQ(created.body["metadata"]["generation"], 1);
  json invalid = Job("bad", -1);
  Answer rejected = Call("POST", kJobs, invalid);
  ASSERT_EQ(rejected.status, 422) << rejected.body.dump();
  EXPECT_THAT(rejected.body["details"]["causes"].dump(),
              HasSubstr("spec.replicaSpecs.Worker.replicas"));
}

TEST_P(ApiServerTest, GenerationFollowsSpecAndStatusHasItsOwnEndpoint) {
  InstallCrd();
  json job = Call("POST", kJobs, Job("j")).body;
  // A status write through the main endpoint is ignored; a spec write bumps the generation.
  json update = job;
  update["status"] = {{"state", "Running"}};
  update["metadata"]["labels"] = {{"a", "b"}};
  Answer u = Call("PUT", std::string(kJobs) + "/j", update);
  ASSERT_EQ(u.status, 200) << u.body.dump();
  EXPECT_FALSE(u.body.contains("status") && u.body["status"].contains("state"));
  EXPECT_EQ(u.body["metadata"]["generation"], 1);
  Answer s = Call("PATCH", std::string(kJobs) + "/j/status",
                  {{"status", {{"state", "Running"}}}, {"spec", {{"ignored", true}}}},
                  "application/merge-patch+json");
  ASSERT_EQ(s.status, 200) << s.body.dump();
  EXPECT_EQ(s.body["status"]["state"], "Running");
  EXPECT_EQ(s.body["metadata"]["generation"], 1);
  Answer spec =
      Call("PATCH", std::string(kJobs) + "/j", {{"spec", {{"runPolicy", {{"backoffLimit", 7}}}}}},
           "application/merge-patch+json");
  ASSERT_EQ(spec.status, 200) << spec.body.dump();
  EXPECT_EQ(spec.body["metadata"]["generation"], 2);
  EXPECT_EQ(spec.body["status"]["state"], "Running");  // kept
}

TEST_P(ApiServerTest, ScaleSubresource) {
  InstallCrd();
  ASSERT_EQ(Call("POST", kJobs, Job("j", 2)).status, 201);
  Answer scale = Call("GET", std::string(kJobs) + "/j/scale");
  ASSERT_EQ(scale.status, 200) << scale.body.dump();
  EXPECT_EQ(scale.body["kind"], "Scale");
  EXPECT_EQ(scale.body["spec"]["replicas"], 2);
  json s = scale.body;
  s["spec"]["replicas"] = 5;
  // A job that is not elastic keeps its count (kubectl scale is refused, not fatal later).
  Answer refused = Call("PUT", std::string(kJobs) + "/j/scale", s);
  EXPECT_EQ(refused.status, 422) << refused.body.dump();
  EXPECT_THAT(refused.body["message"].get<std::string>(),
              ::testing::HasSubstr("replica counts are fixed while the job runs"));
  EXPECT_EQ(
      Call("GET", std::string(kJobs) + "/j").body["spec"]["replicaSpecs"]["Worker"]["replicas"], 2);
  // An elastic one scales within its bounds.
  json elastic = Job("e", 2);
  elastic["spec"]["runPolicy"] = {{"elastic", {{"minReplicas", 1}, {"maxReplicas", 8}}}};
  ASSERT_EQ(Call("POST", kJobs, elastic).status, 201);
  s = Call("GET", std::string(kJobs) + "/e/scale").body;
  s["spec"]["replicas"] = 5;
  ASSERT_EQ(Call("PUT", std::string(kJobs) + "/e/scale", s).status, 200);
  EXPECT_EQ(
      Call("GET", std::string(kJobs) + "/e").body["spec"]["replicaSpecs"]["Worker"]["replicas"], 5);
}

TEST_P(ApiServerTest, PatchFormats) {
  ASSERT_EQ(Call("POST", kPods, Pod("p", {{"a", "1"}})).status, 201);
  Answer merge = Call("PATCH", std::string(kPods) + "/p",
                      {{"metadata", {{"labels", {{"a", nullptr}, {"b", "2"}}}}}},
                      "application/merge-patch+json");
  ASSERT_EQ(merge.status, 200);
  EXPECT_EQ(merge.body["metadata"]["labels"], json({{"b", "2"}}));
  Answer jsonp =
      Call("PATCH", std::string(kPods) + "/p",
           json::array({{{"op", "add"}, {"path", "/metadata/labels/c"}, {"value", "3"}}}),
           "application/json-patch+json");
  ASSERT_EQ(jsonp.status, 200);
  EXPECT_EQ(jsonp.body["metadata"]["labels"]["c"], "3");
  Answer failed_test =
      Call("PATCH", std::string(kPods) + "/p",
           json::array({{{"op", "test"}, {"path", "/metadata/labels/c"}, {"value", "9"}}}),
           "application/json-patch+json");
  EXPECT_EQ(failed_test.status, 422);
  // Strategic merge: containers merge by name instead of replacing the list (in a
  // Deployment's template: a pod's own containers do not change after creation).
  const std::string deployments = "/apis/apps/v1/namespaces/default/deployments";
  json deployment = {{"apiVersion", "apps/v1"},
                     {"kind", "Deployment"},
                     {"metadata", {{"name", "d"}}},
                     {"spec", {{"template", {{"spec", Pod("x")["spec"]}}}}}};
  ASSERT_EQ(Call("POST", deployments, deployment).status, 201);
  json smp = {
      {"spec",
       {{"template", {{"spec", {{"containers", {{{"name", "sidecar"}, {"image", "envoy"}}}}}}}}}}};
  Answer strategic =
      Call("PATCH", deployments + "/d", smp, "application/strategic-merge-patch+json");
  ASSERT_EQ(strategic.status, 200) << strategic.body.dump();
  EXPECT_EQ(strategic.body["spec"]["template"]["spec"]["containers"].size(), 2u);
  json del = {{"spec",
               {{"template",
                 {{"spec", {{"containers", {{{"name", "sidecar"}, {"$patch", "delete"}}}}}}}}}}};
  Answer deleted = Call("PATCH", deployments + "/d", del, "application/strategic-merge-patch+json");
  EXPECT_EQ(deleted.body["spec"]["template"]["spec"]["containers"].size(), 1u);
  EXPECT_EQ(Call("PATCH", std::string(kPods) + "/p", json::object(), "text/plain").status, 415);
  EXPECT_EQ(
      Call("PATCH", std::string(kPods) + "/p", json("{bad"), "application/merge-patch+json").status,
      400);
  InstallCrd();
  ASSERT_EQ(Call("POST", kJobs, Job("j")).status, 201);
  EXPECT_EQ(Call("PATCH", std::string(kJobs) + "/j", json::object(),
                 "application/strategic-merge-patch+json")
                .status,
            415);
}

TEST_P(ApiServerTest, SelectorsAndPagination) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Call("POST", kPods, Pod("p" + std::to_string(i), {{"role", i % 2 ? "ps" : "worker"}}))
                  .status,
              201);
  }
  EXPECT_EQ(Call("GET", std::string(kPods) + "?labelSelector=role%3Dworker").body["items"].size(),
            3u);
  EXPECT_EQ(Call("GET", std::string(kPods) + "?labelSelector=role!%3Dworker").body["items"].size(),
            2u);
  EXPECT_EQ(
      Call("GET", std::string(kPods) + "?fieldSelector=metadata.name%3Dp3").body["items"].size(),
      1u);
  EXPECT_EQ(Call("GET", std::string(kPods) + "?fieldSelector=status.phase%3DPending")
                .body["items"]
                .size(),
            5u);

  Answer page1 = Call("GET", std::string(kPods) + "?limit=2");
  ASSERT_EQ(page1.body["items"].size(), 2u);
  std::string token = page1.body["metadata"]["continue"];
  ASSERT_EQ(Call("POST", kPods, Pod("p9")).status, 201);  // not in the snapshot being paged
  std::vector<std::string> names = {page1.body["items"][0]["metadata"]["name"],
                                    page1.body["items"][1]["metadata"]["name"]};
  while (!token.empty()) {
    Answer next = Call("GET", std::string(kPods) + "?limit=2&continue=" + token);
    ASSERT_EQ(next.status, 200);
    for (const json& item : next.body["items"]) names.push_back(item["metadata"]["name"]);
    EXPECT_EQ(next.body["metadata"]["resourceVersion"], page1.body["metadata"]["resourceVersion"]);
    token = next.body["metadata"].value("continue", "");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4"}));
  EXPECT_EQ(Call("GET", std::string(kPods) + "?limit=2&continue=bm90LWEtdG9rZW4=").status, 400);
}

TEST_P(ApiServerTest, WatchFromAVersionInOrder) {
  std::string rv = Call("POST", kPods, Pod("a")).body["metadata"]["resourceVersion"];
  json b = Call("POST", kPods, Pod("b")).body;
  ASSERT_EQ(Call("PATCH", std::string(kPods) + "/b", {{"metadata", {{"labels", {{"x", "y"}}}}}},
                 "application/merge-patch+json")
                .status,
            200);
  ASSERT_EQ(Call("DELETE", std::string(kPods) + "/a").status, 200);
  std::vector<json> events = WatchEvents(std::string(kPods) + "?resourceVersion=" + rv, 3);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["type"], "ADDED");
  EXPECT_EQ(events[0]["object"]["metadata"]["name"], "b");
  EXPECT_EQ(events[1]["type"], "MODIFIED");
  EXPECT_EQ(events[2]["type"], "DELETED");
  EXPECT_EQ(events[2]["object"]["metadata"]["name"], "a");
  // Without a version: the current state first.
  std::vector<json> current = WatchEvents(kPods, 1);
  ASSERT_EQ(current.size(), 1u);
  EXPECT_EQ(current[0]["object"]["metadata"]["name"], "b");
}

TEST_P(ApiServerTest, WatchSelectorTransitionsAndBookmarks) {
  Reset({.bookmark_interval = absl::Milliseconds(20)});
  std::string rv =
      Call("POST", kPods, Pod("a", {{"role", "worker"}})).body["metadata"]["resourceVersion"];
  ASSERT_EQ(Call("PATCH", std::string(kPods) + "/a", {{"metadata", {{"labels", {{"role", "ps"}}}}}},
                 "application/merge-patch+json")
                .status,
            200);
  std::vector<json> events =
      WatchEvents(std::string(kPods) + "?resourceVersion=" + rv +
                      "&labelSelector=role%3Dworker&allowWatchBookmarks=true",
                  2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["type"], "DELETED");  // it left the selector
  EXPECT_EQ(events[1]["type"], "BOOKMARK");
  EXPECT_EQ(events[1]["object"]["metadata"]["resourceVersion"],
            std::to_string(server_->store().resource_version()));
}

TEST_P(ApiServerTest, WatchFromACompactedVersionIsGone) {
  Reset({.history = 2});
  std::string rv = Call("POST", kPods, Pod("a")).body["metadata"]["resourceVersion"];
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(Call("POST", kPods, Pod("b" + std::to_string(i))).status, 201);
  std::vector<json> events = WatchEvents(std::string(kPods) + "?resourceVersion=" + rv, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "ERROR");
  EXPECT_EQ(events[0]["object"]["code"], 410);
  EXPECT_EQ(events[0]["object"]["reason"], "Expired");
}

TEST_P(ApiServerTest, FinalizersHoldDeletionUntilRemoved) {
  json pod = Pod("f");
  pod["metadata"]["finalizers"] = {"lockstep.io/cleanup"};
  ASSERT_EQ(Call("POST", kPods, pod).status, 201);
  Answer marked = Call("DELETE", std::string(kPods) + "/f");
  ASSERT_EQ(marked.status, 200);
  EXPECT_TRUE(marked.body["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(Call("GET", std::string(kPods) + "/f").status, 200);
  ASSERT_EQ(Call("PATCH", std::string(kPods) + "/f", {{"metadata", {{"finalizers", nullptr}}}},
                 "application/merge-patch+json")
                .status,
            200);
  EXPECT_EQ(Call("GET", std::string(kPods) + "/f").status, 404);
}

TEST_P(ApiServerTest, OwnerReferencesCascade) {
  InstallCrd();
  json job = Call("POST", kJobs, Job("j")).body;
  json owner = {{"apiVersion", "lockstep.io/v1alpha1"},
                {"kind", "TrainingJob"},
                {"name", "j"},
                {"uid", job["metadata"]["uid"]},
                {"controller", true}};
  for (const char* name : {"j-worker-0", "j-worker-1"}) {
    json pod = Pod(name);
    pod["metadata"]["ownerReferences"] = json::array({owner});
    ASSERT_EQ(Call("POST", kPods, pod).status, 201);
  }
  ASSERT_EQ(Call("POST", kPods, Pod("unrelated")).status, 201);
  ASSERT_EQ(Call("DELETE", std::string(kJobs) + "/j").status, 200);
  Answer left = Call("GET", kPods);
  ASSERT_EQ(left.body["items"].size(), 1u);
  EXPECT_EQ(left.body["items"][0]["metadata"]["name"], "unrelated");

  job = Call("POST", kJobs, Job("k")).body;
  owner["uid"] = job["metadata"]["uid"];
  json pod = Pod("k-worker-0");
  pod["metadata"]["ownerReferences"] = json::array({owner});
  ASSERT_EQ(Call("POST", kPods, pod).status, 201);
  ASSERT_EQ(Call("DELETE", std::string(kJobs) + "/k?propagationPolicy=Orphan").status, 200);
  Answer orphan = Call("GET", std::string(kPods) + "/k-worker-0");
  ASSERT_EQ(orphan.status, 200);
  EXPECT_TRUE(orphan.body["metadata"]["ownerReferences"].empty());
}

TEST_P(ApiServerTest, DeletePreconditionsAndGracefulPods) {
  json pod = Call("POST", kPods, Pod("a")).body;
  Answer wrong = Call("DELETE", std::string(kPods) + "/a", {{"preconditions", {{"uid", "other"}}}});
  EXPECT_EQ(wrong.status, 409);
  // A pod on a node is only marked; its runner finishes the deletion.
  ASSERT_EQ(Bind("a").status, 201);
  Answer graceful = Call("DELETE", std::string(kPods) + "/a");
  ASSERT_EQ(graceful.status, 200);
  EXPECT_EQ(graceful.body["metadata"]["deletionGracePeriodSeconds"], 30);
  EXPECT_EQ(Call("GET", std::string(kPods) + "/a").status, 200);
  EXPECT_EQ(Call("DELETE", std::string(kPods) + "/a?gracePeriodSeconds=0").status, 200);
  EXPECT_EQ(Call("GET", std::string(kPods) + "/a").status, 404);
  EXPECT_EQ(Call("DELETE", std::string(kPods) + "/a").status, 404);
}

TEST_P(ApiServerTest, NamespaceDeletionTakesItsObjects) {
  ASSERT_EQ(Call("POST", "/api/v1/namespaces", {{"metadata", {{"name", "team"}}}}).status, 201);
  ASSERT_EQ(Call("POST", "/api/v1/namespaces/team/pods", Pod("a")).status, 201);
  ASSERT_EQ(Call("DELETE", "/api/v1/namespaces/team").status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/team/pods").body["items"].size(), 0u);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/team").status, 404);
}

TEST_P(ApiServerTest, StateSurvivesARestart) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lockstep-api-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Reset({.state_dir = dir.string()});
  InstallCrd();
  ASSERT_EQ(Call("POST", kJobs, Job("j")).status, 201);
  ASSERT_EQ(Call("POST", kPods, Pod("a")).status, 201);
  Reset({.state_dir = dir.string()});
  EXPECT_EQ(Call("GET", std::string(kJobs) + "/j").status, 200);  // the CRD's type is back
  EXPECT_EQ(Call("GET", std::string(kPods) + "/a").status, 200);
  server_.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lockstep::local
