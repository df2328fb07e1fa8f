// API conformance, part two: where a real kube-apiserver is stricter or fuller than a naive
// store. Each test is one difference found by trying the same requests against Kubernetes
// 1.19: the defaults it fills, what it validates and keeps immutable, how it deletes
// namespaces and pods, what discovery answers, and how it parses query parameters and bodies.
// Driven in-process and over raw HTTP, as the rest of the suite.

#include "e2e/api_conformance_fixture.h"

namespace lockstep::local {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

using conformance::Answer;
using conformance::kPods;

class ApiServerStrictTest : public conformance::ApiServerTest {
 protected:
  // The `field` of every cause of a 422.
  static std::vector<std::string> CauseFields(const Answer& a) {
    std::vector<std::string> fields;
    if (!a.body.contains("details") || !a.body["details"].contains("causes")) return fields;
    for (const json& c : a.body["details"]["causes"]) fields.push_back(c.value("field", ""));
    return fields;
  }

  static std::string Path(const std::string& collection, const std::string& name) {
    return collection + "/" + name;
  }

  json Service(const std::string& name, json ports) {
    return {{"apiVersion", "v1"},
            {"kind", "Service"},
            {"metadata", {{"name", name}}},
            {"spec", {{"ports", std::move(ports)}}}};
  }
};

INSTANTIATE_TEST_SUITE_P(InProcessAndOverHttp, ApiServerStrictTest, ::testing::Bool(),
                         conformance::ParamName);

constexpr char kServices[] = "/api/v1/namespaces/default/services";
constexpr char kSecrets[] = "/api/v1/namespaces/default/secrets";
constexpr char kEvents[] = "/api/v1/namespaces/default/events";
constexpr char kLeases[] = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

TEST_P(ApiServerStrictTest, PodsGetTheDefaultsARealServerFills) {
  json pod = Pod("p");
  pod["spec"]["containers"][0]["ports"] = {{{"containerPort", 2222}}};
  pod["spec"]["containers"].push_back({{"name", "pinned"}, {"image", "busybox:1.36"}});
  Answer a = Call("POST", kPods, pod);
  ASSERT_EQ(a.status, 201) << a.body.dump();
  const json& spec = a.body["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Always");
  EXPECT_EQ(spec["dnsPolicy"], "ClusterFirst");
  EXPECT_EQ(spec["terminationGracePeriodSeconds"], 30);
  EXPECT_EQ(spec["schedulerName"], "default-scheduler");
  EXPECT_EQ(spec["serviceAccountName"], "default");
  EXPECT_EQ(spec["serviceAccount"], "default");
  EXPECT_EQ(spec["securityContext"], json::object());
  EXPECT_EQ(spec["enableServiceLinks"], true);
  EXPECT_EQ(spec["priority"], 0);
  const json& main = spec["containers"][0];
  EXPECT_EQ(main["terminationMessagePath"], "/dev/termination-log");
  EXPECT_EQ(main["terminationMessagePolicy"], "File");
  EXPECT_EQ(main["imagePullPolicy"], "Always");  // untagged: latest
  EXPECT_EQ(main["ports"][0]["protocol"], "TCP");
  EXPECT_EQ(spec["containers"][1]["imagePullPolicy"], "IfNotPresent");
  EXPECT_EQ(a.body["status"]["qosClass"], "BestEffort");
  // What the request set is kept.
  json explicit_pod = Pod("q");
  explicit_pod["spec"]["restartPolicy"] = "Never";
  explicit_pod["spec"]["containers"][0]["imagePullPolicy"] = "Never";
  explicit_pod["spec"]["containers"][0]["resources"] = {
      {"limits", {{"cpu", "1"}, {"memory", "1Gi"}}}};
  Answer b = Call("POST", kPods, explicit_pod);
  ASSERT_EQ(b.status, 201) << b.body.dump();
  EXPECT_EQ(b.body["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(b.body["spec"]["containers"][0]["imagePullPolicy"], "Never");
  EXPECT_EQ(b.body["status"]["qosClass"], "Guaranteed");
}

TEST_P(ApiServerStrictTest, ServicesAndSecretsGetTheirDefaults) {
  Answer svc = Call("POST", kServices, Service("web", {{{"port", 80}}}));
  ASSERT_EQ(svc.status, 201) << svc.body.dump();
  EXPECT_EQ(svc.body["spec"]["type"], "ClusterIP");
  EXPECT_EQ(svc.body["spec"]["sessionAffinity"], "None");
  EXPECT_EQ(svc.body["spec"]["ports"][0]["protocol"], "TCP");
  EXPECT_EQ(svc.body["spec"]["ports"][0]["targetPort"], 80);
  EXPECT_FALSE(svc.body["spec"]["clusterIP"].get<std::string>().empty());
  // An update that leaves out the allocated IP keeps it; one that changes it is refused.
  json update = svc.body;
  update["spec"].erase("clusterIP");
  Answer kept = Call("PUT", Path(kServices, "web"), update);
  ASSERT_EQ(kept.status, 200) << kept.body.dump();
  EXPECT_EQ(kept.body["spec"]["clusterIP"], svc.body["spec"]["clusterIP"]);
  update = kept.body;
  update["spec"]["clusterIP"] = "10.96.200.200";
  Answer moved = Call("PUT", Path(kServices, "web"), update);
  EXPECT_EQ(moved.status, 422);
  EXPECT_THAT(moved.body["message"].get<std::string>(), HasSubstr("field is immutable"));

  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "token"}}},
                 {"stringData", {{"token", "abc"}}}};
  Answer s = Call("POST", kSecrets, secret);
  ASSERT_EQ(s.status, 201) << s.body.dump();
  EXPECT_EQ(s.body["type"], "Opaque");
  EXPECT_EQ(s.body["data"]["token"], "YWJj");
  EXPECT_FALSE(s.body.contains("stringData"));
  secret["metadata"]["name"] = "bad";
  secret.erase("stringData");
  secret["data"] = {{"token", "not base64!"}};
  EXPECT_EQ(Call("POST", kSecrets, secret).status, 400);
  secret["data"] = {{"bad key", "YWJj"}};
  EXPECT_EQ(Call("POST", kSecrets, secret).status, 422);
}

TEST_P(ApiServerStrictTest, ServicePortsAreValidated) {
  for (const json& ports :
       {json{{{"port", 0}}}, json{{{"port", 70000}}}, json{{{"port", 80}, {"targetPort", 0}}},
        json{{{"port", 80}, {"targetPort", "Not_A_Name"}}},
        json{{{"port", 80}, {"protocol", "HTTP"}}}, json{{{"port", 80}}, {{"port", 81}}},
        json{{{"port", 80}, {"name", "a"}}, {{"port", 81}, {"name", "a"}}},
        json{{{"port", 80}, {"nodePort", 30001}}}, json::array()}) {
    Answer a = Call("POST", kServices, Service("svc", ports));
    EXPECT_EQ(a.status, 422) << ports.dump() << " " << a.body.dump();
    EXPECT_EQ(a.body["reason"], "Invalid");
    EXPECT_THAT(a.body["details"]["causes"][0]["field"].get<std::string>(), HasSubstr("spec.ports"))
        << ports.dump();
  }
  json headless = Service("headless", json::array());
  headless["spec"]["clusterIP"] = "None";
  EXPECT_EQ(Call("POST", kServices, headless).status, 201);  // headless: no ports needed
  json named = Service("named", {{{"port", 80}, {"name", "http"}, {"targetPort", "web"}},
                                 {{"port", 81}, {"name", "grpc"}}});
  EXPECT_EQ(Call("POST", kServices, named).status, 201);
  json node_port = Service("np", {{{"port", 80}, {"nodePort", 30001}}});
  node_port["spec"]["type"] = "NodePort";
  EXPECT_EQ(Call("POST", kServices, node_port).status, 201);
  node_port["metadata"]["name"] = "np2";
  node_port["spec"]["ports"][0]["nodePort"] = 80;
  EXPECT_EQ(Call("POST", kServices, node_port).status, 422);
}

TEST_P(ApiServerStrictTest, MetadataIsValidatedOnCreateAndUpdate) {
  json bad_key = Pod("a", {{"bad key", "x"}});
  Answer k = Call("POST", kPods, bad_key);
  ASSERT_EQ(k.status, 422) << k.body.dump();
  EXPECT_EQ(CauseFields(k), std::vector<std::string>{"metadata.labels"});
  EXPECT_THAT(k.body["message"].get<std::string>(), HasSubstr("name part must consist of"));
  EXPECT_EQ(Call("POST", kPods, Pod("a", {{"app", std::string(64, 'v')}})).status, 422);
  EXPECT_EQ(Call("POST", kPods, Pod("a", {{"app", "-x"}})).status, 422);
  EXPECT_EQ(Call("POST", kPods, Pod("a", {{"example.com/Bad_Prefix/x", "v"}})).status, 422);
  json annotated = Pod("a");
  annotated["metadata"]["annotations"] = {{"not/a/key", "any value at all, spaces too"}};
  EXPECT_EQ(Call("POST", kPods, annotated).status, 422);
  // Valid: a prefixed key, an empty value, free-form annotation values.
  json good = Pod("a", {{"lockstep.io/replica-type", "worker"}, {"empty", ""}});
  good["metadata"]["annotations"] = {{"note", "any value at all, spaces too"}};
  Answer created = Call("POST", kPods, good);
  ASSERT_EQ(created.status, 201) << created.body.dump();
  // The same rules on update.
  Answer relabel = Call("PATCH", Path(kPods, "a"), {{"metadata", {{"labels", {{"b@d", "x"}}}}}},
                        "application/merge-patch+json");
  EXPECT_EQ(relabel.status, 422);

  // Owner references name their owner fully; one controller at most.
  json owned = Pod("b");
  owned["metadata"]["ownerReferences"] = {
      {{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", "a"}}};  // no uid
  Answer no_uid = Call("POST", kPods, owned);
  ASSERT_EQ(no_uid.status, 422);
  EXPECT_EQ(CauseFields(no_uid), std::vector<std::string>{"metadata.ownerReferences[0].uid"});
  EXPECT_THAT(no_uid.body["message"].get<std::string>(), HasSubstr("uid must not be empty"));
  json ref = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"name", "a"},
              {"uid", created.body["metadata"]["uid"]},
              {"controller", true}};
  json other = ref;
  other["name"] = "c";
  owned["metadata"]["ownerReferences"] = {ref, other};
  Answer two = Call("POST", kPods, owned);
  ASSERT_EQ(two.status, 422);
  EXPECT_THAT(two.body["message"].get<std::string>(),
              HasSubstr("Only one reference can have Controller set to true"));
  owned["metadata"]["ownerReferences"] = json::array({ref});
  EXPECT_EQ(Call("POST", kPods, owned).status, 201);
}

TEST_P(ApiServerStrictTest, NamesFollowEachKindsRule) {
  Answer dotted = Call("POST", "/api/v1/namespaces", {{"metadata", {{"name", "team.a"}}}});
  EXPECT_EQ(dotted.status, 422) << dotted.body.dump();  // a namespace is a DNS label
  EXPECT_EQ(
      Call("POST", "/api/v1/namespaces", {{"metadata", {{"name", std::string(64, 'n')}}}}).status,
      422);
  EXPECT_EQ(Call("POST", kServices, Service("1web", {{{"port", 80}}})).status, 422);
  EXPECT_EQ(Call("POST", kPods, Pod(std::string(254, 'p'))).status, 422);
  // RBAC names are path segments: charts use "system:..." names.
  json role = {{"apiVersion", "rbac.authorization.k8s.io/v1"},
               {"kind", "ClusterRole"},
               {"metadata", {{"name", "system:lockstep:viewer"}}},
               {"rules", json::array()}};
  const std::string roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
  EXPECT_EQ(Call("POST", roles, role).status, 201);
  role["metadata"]["name"] = "a/b";
  EXPECT_EQ(Call("POST", roles, role).status, 422);
  json container = Pod("c");
  container["spec"]["containers"][0]["name"] = "Main_Container";
  Answer c = Call("POST", kPods, container);
  EXPECT_EQ(c.status, 422);
  EXPECT_EQ(CauseFields(c), std::vector<std::string>{"spec.containers[0].name"});
}

TEST_P(ApiServerStrictTest, EventsAndLeasesAreValidated) {
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", "e1"}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "p"}, {"namespace", "other"}}},
                {"reason", "Started"}};
  Answer wrong = Call("POST", kEvents, event);
  ASSERT_EQ(wrong.status, 422) << wrong.body.dump();
  EXPECT_EQ(CauseFields(wrong), std::vector<std::string>{"involvedObject.namespace"});
  EXPECT_THAT(wrong.body["message"].get<std::string>(),
              HasSubstr("does not match event.namespace"));
  event["involvedObject"]["namespace"] = "default";
  EXPECT_EQ(Call("POST", kEvents, event).status, 201);
  // A cluster-scoped object's events live in "default".
  json node_event = event;
  node_event["metadata"]["name"] = "e2";
  node_event["involvedObject"] = {{"kind", "Node"}, {"name", "local"}};
  EXPECT_EQ(Call("POST", kEvents, node_event).status, 201);
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/kube-system/events", node_event).status, 422);

  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "leader"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 0}}}};
  Answer zero = Call("POST", kLeases, lease);
  ASSERT_EQ(zero.status, 422);
  EXPECT_EQ(CauseFields(zero), std::vector<std::string>{"spec.leaseDurationSeconds"});
  lease["spec"]["leaseDurationSeconds"] = 15;
  lease["spec"]["leaseTransitions"] = -1;
  EXPECT_EQ(Call("POST", kLeases, lease).status, 422);
  lease["spec"]["leaseTransitions"] = 0;
  json stored = Call("POST", kLeases, lease).body;
  ASSERT_EQ(stored["spec"]["leaseDurationSeconds"], 15);
  stored["spec"]["leaseDurationSeconds"] = -5;
  EXPECT_EQ(Call("PUT", Path(kLeases, "leader"), stored).status, 422);
}

TEST_P(ApiServerStrictTest, APodSpecChangesOnlyWhereKubernetesAllows) {
  json pod = Pod("p");
  pod["spec"]["containers"][0]["image"] = "busybox:1.36";
  pod["spec"]["tolerations"] = {{{"key", "gpu"}, {"operator", "Exists"}}};
  ASSERT_EQ(Call("POST", kPods, pod).status, 201);
  // An image may change, through a merge patch that replaces the containers list too: the
  // replaced list is defaulted again, so only the image differs.
  Answer image = Call("PATCH", Path(kPods, "p"),
                      {{"spec", {{"containers", {{{"name", "main"}, {"image", "busybox:1.37"}}}}}}},
                      "application/merge-patch+json");
  ASSERT_EQ(image.status, 200) << image.body.dump();
  EXPECT_EQ(image.body["spec"]["containers"][0]["image"], "busybox:1.37");
  EXPECT_EQ(image.body["spec"]["containers"][0]["terminationMessagePath"], "/dev/termination-log");
  // A list that names another container is a change of the spec.
  Answer renamed = Call("PATCH", Path(kPods, "p"),
                        {{"spec", {{"containers", {{{"name", "other"}, {"image", "busybox"}}}}}}},
                        "application/merge-patch+json");
  ASSERT_EQ(renamed.status, 422) << renamed.body.dump();
  EXPECT_EQ(CauseFields(renamed), std::vector<std::string>{"spec"});
  EXPECT_THAT(renamed.body["message"].get<std::string>(),
              HasSubstr("pod updates may not change fields other than"));
  // So is a container added by a strategic merge patch, or a restart policy.
  EXPECT_EQ(Call("PATCH", Path(kPods, "p"),
                 {{"spec", {{"containers", {{{"name", "sidecar"}, {"image", "envoy"}}}}}}},
                 "application/strategic-merge-patch+json")
                .status,
            422);
  EXPECT_EQ(Call("PATCH", Path(kPods, "p"), {{"spec", {{"restartPolicy", "Never"}}}},
                 "application/merge-patch+json")
                .status,
            422);
  // The active deadline may be set, then only shortened; tolerations may only be added.
  auto patch = [&](json spec) {
    return Call("PATCH", Path(kPods, "p"), {{"spec", std::move(spec)}},
                "application/merge-patch+json")
        .status;
  };
  EXPECT_EQ(patch({{"activeDeadlineSeconds", 600}}), 200);
  EXPECT_EQ(patch({{"activeDeadlineSeconds", 300}}), 200);
  EXPECT_EQ(patch({{"activeDeadlineSeconds", 900}}), 422);
  json more = {{{"key", "gpu"}, {"operator", "Exists"}}, {{"key", "spot"}, {"operator", "Exists"}}};
  EXPECT_EQ(patch({{"tolerations", more}}), 200);
  EXPECT_EQ(patch({{"tolerations", json::array()}}), 422);
  // spec.nodeName is the binding's to set, once.
  EXPECT_EQ(patch({{"nodeName", "elsewhere"}}), 422);
  Answer bound = Bind("p", "local");
  ASSERT_EQ(bound.status, 201) << bound.body.dump();
  EXPECT_EQ(bound.body["kind"], "Status");
  Answer got = Call("GET", Path(kPods, "p"));
  EXPECT_EQ(got.body["spec"]["nodeName"], "local");
  EXPECT_EQ(got.body["status"]["conditions"][0]["type"], "PodScheduled");
  Answer again = Bind("p", "other");
  EXPECT_EQ(again.status, 409);
  EXPECT_THAT(again.body["message"].get<std::string>(),
              HasSubstr("is already assigned to node \"local\""));
  EXPECT_EQ(Bind("ghost").status, 404);
}

// An update made from a pod read before its binding is a conflict, as in Kubernetes, not a
// forbidden change of spec.nodeName: the client reads again and retries (a patch does so
// itself), where a 422 would fail it for a change it did not make.
TEST_P(ApiServerStrictTest, AnUpdateFromAStaleReadIsAConflictNotAForbiddenChange) {
  ASSERT_EQ(Call("POST", kPods, Pod("s")).status, 201);
  json read = Call("GET", Path(kPods, "s")).body;
  ASSERT_EQ(Bind("s", "local").status, 201);
  read["metadata"]["labels"] = {{"v", "2"}};
  Answer stale = Call("PUT", Path(kPods, "s"), read);
  EXPECT_EQ(stale.status, 409) << stale.body.dump();
  EXPECT_EQ(stale.body["reason"], "Conflict");
  Answer patched = Call("PATCH", Path(kPods, "s"), {{"metadata", {{"labels", {{"v", "2"}}}}}},
                        "application/merge-patch+json");
  ASSERT_EQ(patched.status, 200) << patched.body.dump();
  EXPECT_EQ(patched.body["metadata"]["labels"]["v"], "2");
  EXPECT_EQ(patched.body["spec"]["nodeName"], "local");
}

TEST_P(ApiServerStrictTest, FinalizersAndGracePeriodsOnDeletion) {
  json pod = Pod("f");
  pod["metadata"]["finalizers"] = {"lockstep.io/a"};
  ASSERT_EQ(Call("POST", kPods, pod).status, 201);
  ASSERT_EQ(Call("DELETE", Path(kPods, "f")).status, 200);
  Answer added = Call("PATCH", Path(kPods, "f"),
                      {{"metadata", {{"finalizers", {"lockstep.io/a", "lockstep.io/b"}}}}},
                      "application/merge-patch+json");
  ASSERT_EQ(added.status, 422) << added.body.dump();
  EXPECT_EQ(CauseFields(added), std::vector<std::string>{"metadata.finalizers"});
  EXPECT_THAT(added.body["message"].get<std::string>(),
              HasSubstr("no new finalizers can be added if the object is being deleted"));
  ASSERT_EQ(Call("PATCH", Path(kPods, "f"), {{"metadata", {{"finalizers", json::array()}}}},
                 "application/merge-patch+json")
                .status,
            200);
  EXPECT_EQ(Call("GET", Path(kPods, "f")).status, 404);

  // A second delete shortens a running pod's grace period, and never lengthens it.
  ASSERT_EQ(Call("POST", kPods, Pod("g")).status, 201);
  ASSERT_EQ(Bind("g").status, 201);
  Answer first = Call("DELETE", Path(kPods, "g"));
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.body["metadata"]["deletionGracePeriodSeconds"], 30);
  Answer shorter = Call("DELETE", Path(kPods, "g") + "?gracePeriodSeconds=5");
  ASSERT_EQ(shorter.status, 200);
  EXPECT_EQ(shorter.body["metadata"]["deletionGracePeriodSeconds"], 5);
  EXPECT_LT(shorter.body["metadata"]["deletionTimestamp"].get<std::string>(),
            first.body["metadata"]["deletionTimestamp"].get<std::string>());
  Answer longer = Call("DELETE", Path(kPods, "g"), {{"gracePeriodSeconds", 20}});
  EXPECT_EQ(longer.body["metadata"]["deletionGracePeriodSeconds"], 5);
  EXPECT_EQ(Call("DELETE", Path(kPods, "g") + "?gracePeriodSeconds=0").status, 200);
  EXPECT_EQ(Call("GET", Path(kPods, "g")).status, 404);
}

TEST_P(ApiServerStrictTest, ANoOpUpdateKeepsTheResourceVersion) {
  json pod = Call("POST", kPods, Pod("a", {{"x", "1"}})).body;
  std::string rv = pod["metadata"]["resourceVersion"];
  Answer put = Call("PUT", Path(kPods, "a"), pod);
  ASSERT_EQ(put.status, 200) << put.body.dump();
  EXPECT_EQ(put.body["metadata"]["resourceVersion"], rv);
  Answer merge = Call("PATCH", Path(kPods, "a"), {{"metadata", {{"labels", {{"x", "1"}}}}}},
                      "application/merge-patch+json");
  EXPECT_EQ(merge.body["metadata"]["resourceVersion"], rv);
  json status = {{"status", pod["status"]}};
  EXPECT_EQ(Call("PATCH", Path(kPods, "a") + "/status", status, "application/merge-patch+json")
                .body["metadata"]["resourceVersion"],
            rv);
  // Watchers saw nothing: the first event after `rv` is the next real change.
  ASSERT_EQ(Call("PATCH", Path(kPods, "a"), {{"metadata", {{"labels", {{"x", "2"}}}}}},
                 "application/merge-patch+json")
                .status,
            200);
  std::vector<json> events = WatchEvents(std::string(kPods) + "?resourceVersion=" + rv, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "MODIFIED");
  EXPECT_EQ(events[0]["object"]["metadata"]["labels"]["x"], "2");
  // A stale version is still a conflict, even when nothing would change.
  EXPECT_EQ(Call("PUT", Path(kPods, "a"), pod).status, 409);
}

TEST_P(ApiServerStrictTest, ANamespaceTerminatesUntilItsContentsHaveGone) {
  const std::string team = "/api/v1/namespaces/team";
  ASSERT_EQ(Call("POST", "/api/v1/namespaces", {{"metadata", {{"name", "team"}}}}).status, 201);
  ASSERT_EQ(Call("POST", team + "/pods", Pod("running")).status, 201);
  ASSERT_EQ(Call("POST", team + "/pods/running/binding",
                 {{"metadata", {{"name", "running"}}}, {"target", {{"name", "local"}}}})
                .status,
            201);
  ASSERT_EQ(Call("POST", team + "/pods", Pod("pending")).status, 201);
  Answer deleted = Call("DELETE", team);
  ASSERT_EQ(deleted.status, 200) << deleted.body.dump();
  EXPECT_EQ(deleted.body["status"]["phase"], "Terminating");
  Answer ns = Call("GET", team);
  ASSERT_EQ(ns.status, 200);
  EXPECT_EQ(ns.body["status"]["phase"], "Terminating");
  EXPECT_TRUE(ns.body["metadata"].contains("deletionTimestamp"));
  // The pending pod went at once; the running one is stopping.
  EXPECT_EQ(Call("GET", team + "/pods/pending").status, 404);
  Answer running = Call("GET", team + "/pods/running");
  ASSERT_EQ(running.status, 200);
  EXPECT_TRUE(running.body["metadata"].contains("deletionTimestamp"));
  // Nothing new in it meanwhile; what is there may still be updated.
  Answer refused = Call("POST", team + "/pods", Pod("late"));
  ASSERT_EQ(refused.status, 403) << refused.body.dump();
  EXPECT_EQ(refused.body["reason"], "Forbidden");
  EXPECT_THAT(refused.body["message"].get<std::string>(),
              HasSubstr("unable to create new content in namespace team because it is being "
                        "terminated"));
  EXPECT_EQ(refused.body["details"]["causes"][0]["reason"], "NamespaceTerminating");
  EXPECT_EQ(Call("PATCH", team + "/pods/running/status", {{"status", {{"phase", "Running"}}}},
                 "application/merge-patch+json")
                .status,
            200);
  // Its last pod gone (as the runner removes a stopped one), the namespace goes.
  ASSERT_EQ(Call("DELETE", team + "/pods/running?gracePeriodSeconds=0").status, 200);
  EXPECT_EQ(Call("GET", team).status, 404);
  EXPECT_EQ(Call("POST", "/api/v1/namespaces", {{"metadata", {{"name", "team"}}}}).status, 201);
}

TEST_P(ApiServerStrictTest, DiscoveryAnswersWhatClientsAskFor) {
  for (const char* path : {"/version", "/version/"}) {
    Answer v = Call("GET", path);
    ASSERT_EQ(v.status, 200) << path;
    for (const char* field : {"major", "minor", "gitVersion", "gitCommit", "gitTreeState",
                              "buildDate", "goVersion", "compiler", "platform"}) {
      EXPECT_TRUE(v.body.contains(field) && v.body[field].is_string()) << path << " " << field;
    }
  }
  InstallCrd();
  for (const char* group : {"lockstep.io", "apps", "coordination.k8s.io"}) {
    Answer g = Call("GET", std::string("/apis/") + group);
    ASSERT_EQ(g.status, 200) << group;
    EXPECT_EQ(g.body["kind"], "APIGroup");
    EXPECT_EQ(g.body["name"], group);
    EXPECT_EQ(g.body["preferredVersion"], g.body["versions"][0]);
  }
  EXPECT_EQ(Call("GET", "/apis/lockstep.io").body["preferredVersion"]["groupVersion"],
            "lockstep.io/v1alpha1");
  EXPECT_EQ(Call("GET", "/apis/nothing.io").status, 404);
  bool binding = false;
  Answer core = Call("GET", "/api/v1");
  for (const json& r : core.body["resources"]) {
    binding |= r["name"] == "pods/binding" && r["verbs"] == json::array({"create"});
  }
  EXPECT_TRUE(binding);
}

TEST_P(ApiServerStrictTest, ErrorsAreTheOnesARealServerGives) {
  ASSERT_EQ(Call("POST", kPods, Pod("a")).status, 201);
  // Field selectors name fields the kind supports.
  Answer unknown = Call("GET", std::string(kPods) + "?fieldSelector=spec.hostname%3Dx");
  ASSERT_EQ(unknown.status, 400);
  EXPECT_THAT(unknown.body["message"].get<std::string>(),
              HasSubstr("\"spec.hostname\" is not a known field selector"));
  EXPECT_EQ(
      Call("GET", std::string(kServices) + "?fieldSelector=spec.sessionAffinity%3DNone").status,
      400);
  EXPECT_EQ(
      Call("GET", std::string(kPods) + "?fieldSelector=spec.nodeName%3D").body["items"].size(), 1u);
  EXPECT_EQ(Call("GET", std::string(kEvents) +
                            "?fieldSelector=involvedObject.name%3Da,involvedObject.kind%3DPod")
                .status,
            200);
  // A continue token that is not one is a bad request; an expired one is Gone.
  EXPECT_EQ(Call("GET", std::string(kPods) + "?limit=1&continue=bm90LWEtdG9rZW4=").status, 400);
  EXPECT_EQ(Call("GET", std::string(kPods) + "?limit=1&continue=%25%25").status, 400);
  ASSERT_EQ(Call("POST", kPods, Pod("b")).status, 201);
  std::string token = Call("GET", std::string(kPods) + "?limit=1").body["metadata"]["continue"];
  for (int i = 0; i < 70; ++i) Call("GET", std::string(kPods) + "?limit=1");  // newer snapshots
  Answer gone = Call("GET", std::string(kPods) + "?limit=1&continue=" + token);
  EXPECT_EQ(gone.status, 410);
  EXPECT_EQ(gone.body["reason"], "Expired");
  // Malformed numbers are bad requests, not zero.
  EXPECT_EQ(Call("GET", std::string(kPods) + "?limit=ten").status, 400);
  EXPECT_EQ(Call("DELETE", Path(kPods, "a") + "?gracePeriodSeconds=soon").status, 400);
  // An unknown propagation policy is invalid DeleteOptions, 422.
  Answer policy = Call("DELETE", Path(kPods, "a") + "?propagationPolicy=Sideways");
  ASSERT_EQ(policy.status, 422);
  EXPECT_EQ(policy.body["reason"], "Invalid");
  EXPECT_THAT(policy.body["message"].get<std::string>(),
              HasSubstr("propagationPolicy: Unsupported value: \"Sideways\""));
  // A body in neither JSON nor YAML is 415; YAML is read.
  Answer text = Call("POST", kPods, json("name: x"), "text/plain");
  EXPECT_EQ(text.status, 415);
  EXPECT_EQ(text.body["reason"], "UnsupportedMediaType");
  Answer yaml = Call("POST", kPods,
                     json("apiVersion: v1\nkind: Pod\nmetadata:\n  name: from-yaml\nspec:\n"
                          "  containers:\n  - name: main\n    image: busybox\n"),
                     "application/yaml");
  ASSERT_EQ(yaml.status, 201) << yaml.body.dump();
  EXPECT_EQ(yaml.body["metadata"]["name"], "from-yaml");
  // A namespace in the body that is not the URL's is a bad request.
  json elsewhere = Pod("c");
  elsewhere["metadata"]["namespace"] = "kube-system";
  Answer ns = Call("POST", kPods, elsewhere);
  EXPECT_EQ(ns.status, 400);
  EXPECT_THAT(ns.body["message"].get<std::string>(),
              HasSubstr("does not match the namespace sent on the request"));
}

TEST_P(ApiServerStrictTest, QueryParametersParseAsTheRealServerParsesThem) {
  ASSERT_EQ(Call("POST", kPods, Pod("a")).status, 201);
  // A boolean is false only when absent, "false" or "0" (any case): the Python client sends
  // watch=True.
  for (const char* yes : {"true", "True", "TRUE", "1", "t", "yes"}) {
    EXPECT_TRUE(AnswersWithAWatch(std::string(kPods) + "?watch=" + yes)) << yes;
  }
  for (const char* no : {"false", "False", "FALSE", "0"}) {
    Answer list = Call("GET", std::string(kPods) + "?watch=" + no);
    EXPECT_EQ(list.body["kind"], "PodList") << no;
  }
  // dryRun=All admits and answers without storing; any other value is refused.
  Answer dry = Call("POST", std::string(kPods) + "?dryRun=All", Pod("dry"));
  ASSERT_EQ(dry.status, 201) << dry.body.dump();
  EXPECT_EQ(dry.body["metadata"]["name"], "dry");
  EXPECT_EQ(Call("GET", Path(kPods, "dry")).status, 404);
  EXPECT_EQ(Call("POST", std::string(kPods) + "?dryRun=All", Pod("Bad_Name")).status, 422);
  EXPECT_EQ(Call("POST", std::string(kPods) + "?dryRun=Yes", Pod("dry")).status, 422);
  std::string rv = Call("GET", Path(kPods, "a")).body["metadata"]["resourceVersion"];
  Answer dry_patch =
      Call("PATCH", Path(kPods, "a") + "?dryRun=All", {{"metadata", {{"labels", {{"x", "y"}}}}}},
           "application/merge-patch+json");
  ASSERT_EQ(dry_patch.status, 200);
  EXPECT_EQ(dry_patch.body["metadata"]["labels"]["x"], "y");
  Answer after = Call("GET", Path(kPods, "a"));
  EXPECT_EQ(after.body["metadata"]["resourceVersion"], rv);
  EXPECT_FALSE(after.body["metadata"].contains("labels") &&
               after.body["metadata"]["labels"].contains("x"));
  EXPECT_EQ(Call("DELETE", Path(kPods, "a") + "?dryRun=All").status, 200);
  EXPECT_EQ(Call("GET", Path(kPods, "a")).status, 200);
  // kubectl delete --dry-run=server puts it in the DeleteOptions body: still nothing removed.
  Answer body_dry = Call("DELETE", Path(kPods, "a"),
                         {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"dryRun", {"All"}}});
  EXPECT_EQ(body_dry.status, 200) << body_dry.body.dump();
  EXPECT_EQ(Call("GET", Path(kPods, "a")).status, 200);
  EXPECT_EQ(Call("DELETE", std::string(kPods), {{"dryRun", {"All"}}}).status, 200);  // a collection
  EXPECT_EQ(Call("GET", Path(kPods, "a")).status, 200);
  EXPECT_EQ(Call("DELETE", Path(kPods, "a"), {{"dryRun", {"Yes"}}}).status, 422);
  EXPECT_EQ(Call("DELETE", Path(kPods, "a"), {{"dryRun", "All"}}).status, 400);
  EXPECT_EQ(Call("GET", Path(kPods, "a")).status, 200);
}

// A built-in object is decoded into its Go type before anything else: a value of the wrong
// JSON type is a 400 naming the field, as Go's decoder does (the finding: a ConfigMap
// whose data held a number was stored). A custom resource's metadata is decoded the same way.
TEST_P(ApiServerStrictTest, WronglyTypedFieldsOfBuiltInKindsAreBadRequests) {
  const std::string config_maps = "/api/v1/namespaces/default/configmaps";
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "settings"}}},
             {"data", {{"epochs", 5}}}};
  Answer number = Call("POST", config_maps, cm);
  EXPECT_EQ(number.status, 400) << number.body.dump();
  EXPECT_EQ(number.body["reason"], "BadRequest");
  EXPECT_EQ(number.body["message"],
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot "
            "unmarshal number into Go struct field ConfigMap.data of type string");
  EXPECT_EQ(Call("GET", Path(config_maps, "settings")).status, 404);
  cm["data"]["epochs"] = "5";
  ASSERT_EQ(Call("POST", config_maps, cm).status, 201);
  // An update too, and the pod's fields, and labels of any kind.
  cm["data"] = {{"epochs", true}};
  EXPECT_EQ(Call("PUT", Path(config_maps, "settings"), cm).status, 400);
  json pod = Pod("typed");
  pod["spec"]["containers"][0]["ports"] = {{{"containerPort", "2222"}}};
  Answer port = Call("POST", kPods, pod);
  EXPECT_EQ(port.status, 400) << port.body.dump();
  EXPECT_THAT(port.body["message"].get<std::string>(),
              HasSubstr("Pod.spec.containers.ports.containerPort of type int64"));
  pod = Pod("typed");
  pod["spec"]["containers"][0]["args"] = "--epochs=5";
  EXPECT_EQ(Call("POST", kPods, pod).status, 400);
  pod = Pod("typed", {{"replica", 1}});
  EXPECT_EQ(Call("POST", kPods, pod).status, 400);
  InstallCrd();
  json job = Job("typed");
  job["metadata"]["labels"] = {{"team", 7}};
  Answer label = Call("POST", conformance::kJobs, job);
  EXPECT_EQ(label.status, 400) << label.body.dump();
  EXPECT_THAT(label.body["message"].get<std::string>(),
              HasSubstr("TrainingJob.metadata.labels of type string"));
  // null is every type's zero value; a quantity may be a number.
  pod = Pod("fits");
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", 2}, {"memory", "1Gi"}}}};
  pod["spec"]["containers"][0]["args"] = nullptr;
  EXPECT_EQ(Call("POST", kPods, pod).status, 201);
}

// A custom resource is never updated unconditionally: a PUT without metadata.resourceVersion
// is 422 (the finding: the local server took it). A built-in one may be.
TEST_P(ApiServerStrictTest, ACustomResourceUpdateWithoutResourceVersionIsInvalid) {
  InstallCrd();
  ASSERT_EQ(Call("POST", conformance::kJobs, Job("versioned")).status, 201);
  json job = Job("versioned");
  job["spec"]["runPolicy"] = {{"backoffLimit", 7}};
  Answer put = Call("PUT", Path(conformance::kJobs, "versioned"), job);
  EXPECT_EQ(put.status, 422) << put.body.dump();
  EXPECT_THAT(put.body["message"].get<std::string>(),
              HasSubstr("metadata.resourceVersion: Invalid value: 0x0: must be specified for an "
                        "update"));
  EXPECT_EQ(Call("PUT", Path(conformance::kJobs, "versioned") + "/status", job).status, 422);
  job["metadata"]["resourceVersion"] =
      Call("GET", Path(conformance::kJobs, "versioned")).body["metadata"]["resourceVersion"];
  EXPECT_EQ(Call("PUT", Path(conformance::kJobs, "versioned"), job).status, 200);
  ASSERT_EQ(Call("POST", kPods, Pod("plain")).status, 201);
  json pod = Call("GET", Path(kPods, "plain")).body;
  pod["metadata"].erase("resourceVersion");
  pod["metadata"]["labels"] = {{"x", "y"}};
  EXPECT_EQ(Call("PUT", Path(kPods, "plain"), pod).status, 200);
}

// The Eviction API (what kubectl drain calls): a budget it would break refuses it (429), a dry
// run (query or DeleteOptions) leaves the pod, otherwise the pod is marked DisruptionTarget and
// deleted.
TEST_P(ApiServerStrictTest, EvictionsHonourDisruptionBudgetsAndDryRuns) {
  ASSERT_EQ(Call("POST", kPods, Pod("evicted", {{"app", "train"}})).status, 201);
  json running = Call("GET", Path(kPods, "evicted")).body;
  running["status"] = {{"phase", "Running"},
                       {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
  ASSERT_EQ(Call("PUT", Path(kPods, "evicted") + "/status", running).status, 200);
  const json eviction = {
      {"apiVersion", "policy/v1"}, {"kind", "Eviction"}, {"metadata", {{"name", "evicted"}}}};
  const std::string pdbs = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
  json pdb = {{"apiVersion", "policy/v1"},
              {"kind", "PodDisruptionBudget"},
              {"metadata", {{"name", "keep-one"}}},
              {"spec", {{"minAvailable", 1}, {"selector", {{"matchLabels", {{"app", "train"}}}}}}}};
  ASSERT_EQ(Call("POST", pdbs, pdb).status, 201);
  Answer refused = Call("POST", Path(kPods, "evicted") + "/eviction", eviction);
  EXPECT_EQ(refused.status, 429) << refused.body.dump();
  EXPECT_EQ(refused.body["message"],
            "Cannot evict pod as it would violate the pod's disruption budget.");
  EXPECT_EQ(refused.body["details"]["causes"][0]["reason"], "DisruptionBudget");
  ASSERT_EQ(Call("DELETE", Path(pdbs, "keep-one")).status, 200);
  EXPECT_EQ(Call("POST", Path(kPods, "evicted") + "/eviction?dryRun=All", eviction).status, 201);
  json body_dry = eviction;
  body_dry["deleteOptions"] = {{"dryRun", {"All"}}};
  EXPECT_EQ(Call("POST", Path(kPods, "evicted") + "/eviction", body_dry).status, 201);
  json after = Call("GET", Path(kPods, "evicted")).body;
  EXPECT_FALSE(after["metadata"].contains("deletionTimestamp")) << after.dump();
  Answer evicted = Call("POST", Path(kPods, "evicted") + "/eviction", eviction);
  EXPECT_EQ(evicted.status, 201) << evicted.body.dump();
  EXPECT_EQ(evicted.body["status"], "Success");
  Answer gone = Call("GET", Path(kPods, "evicted"));
  if (gone.status == 200) {  // on a node it stops first: marked, with the condition
    EXPECT_TRUE(gone.body["metadata"].contains("deletionTimestamp"));
    bool marked = false;
    for (const json& c : gone.body["status"]["conditions"]) {
      marked =
          marked || (c["type"] == "DisruptionTarget" && c["reason"] == "EvictionByEvictionAPI");
    }
    EXPECT_TRUE(marked) << gone.body.dump();
  } else {
    EXPECT_EQ(gone.status, 404);
  }
  EXPECT_EQ(Call("POST", Path(kPods, "nobody") + "/eviction", eviction).status, 400);  // names
  json nobody = eviction;
  nobody["metadata"]["name"] = "nobody";
  EXPECT_EQ(Call("POST", Path(kPods, "nobody") + "/eviction", nobody).status, 404);
}

// A pod's volumeMounts name volumes of the pod (the finding: the local server and
// lockstep validate took one naming nothing, which a real server refuses).
TEST_P(ApiServerStrictTest, APodsVolumeMountsMustNameItsVolumes) {
  json pod = Pod("mounts");
  pod["spec"]["containers"][0]["volumeMounts"] = {{{"name", "data"}, {"mountPath", "/data"}}};
  Answer missing = Call("POST", kPods, pod);
  EXPECT_EQ(missing.status, 422) << missing.body.dump();
  EXPECT_THAT(CauseFields(missing),
              ::testing::ElementsAre("spec.containers[0].volumeMounts[0].name"));
  EXPECT_EQ(missing.body["details"]["causes"][0]["reason"], "FieldValueNotFound");
  pod["spec"]["volumes"] = {{{"name", "data"}, {"emptyDir", json::object()}}};
  EXPECT_EQ(Call("POST", kPods, pod).status, 201);
}

}  // namespace
}  // namespace lockstep::local
