// The kind strategies as tables: each kind's defaults, validation, deletion rules and columns,
// with no server around them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/local/apiserver/kinds/kind_strategy.h"

namespace lockstep::local {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A built-in type, as the registry serves it (the registry keeps it alive).
const ResourceType& Type(const std::string& group, const std::string& plural) {
  static const ResourceRegistry registry;
  std::shared_ptr<const ResourceType> t = registry.Find(group, "v1", plural);
  if (!t) throw std::runtime_error("no type " + plural);
  return *t;
}

ResourceType CustomType(bool status_subresource) {
  ResourceType t;
  t.group = "example.com";
  t.version = "v1";
  t.plural = "widgets";
  t.kind = "Widget";
  t.status_subresource = status_subresource;
  t.schema = {
      {"type", "object"},
      {"properties",
       {{"spec",
         {{"type", "object"},
          {"properties", {{"size", {{"type", "integer"}, {"minimum", 1}, {"default", 3}}}}}}},
        {"status", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}};
  t.printer_columns =
      json::array({{{"name", "Size"}, {"type", "integer"}, {"jsonPath", ".spec.size"}}});
  return t;
}

std::vector<std::string> ColumnNames(const std::vector<TableColumn>& cols) {
  std::vector<std::string> out;
  for (const TableColumn& c : cols) out.push_back(c.name);
  return out;
}

TEST(KindStrategyTest, EachTypeGetsItsKindsRules) {
  EXPECT_EQ(&StrategyFor(Type("", "pods")), &PodStrategy());
  EXPECT_EQ(&StrategyFor(Type("", "services")), &ServiceStrategy());
  EXPECT_EQ(&StrategyFor(Type("", "namespaces")), &NamespaceStrategy());
  EXPECT_EQ(&StrategyFor(Type("", "events")), &EventStrategy());
  EXPECT_EQ(&StrategyFor(Type("apiextensions.k8s.io", "customresourcedefinitions")),
            &CustomResourceDefinitionStrategy());
  EXPECT_EQ(&StrategyFor(CustomType(true)), &CustomResourceStrategy());
  const KindStrategy& secrets = StrategyFor(Type("", "secrets"));
  EXPECT_NE(&secrets, &PodStrategy());
  EXPECT_THAT(ColumnNames(secrets.TableColumns(Type("", "secrets"))), ElementsAre("Name", "Age"));
}

TEST(KindStrategyTest, NamesFollowTheKind) {
  // Services become DNS labels (no dots); other objects are DNS subdomains.
  EXPECT_THAT(ServiceStrategy().ValidateName("a.b"), ::testing::Not(IsEmpty()));
  EXPECT_THAT(PodStrategy().ValidateName("a.b"), IsEmpty());
  EXPECT_THAT(PodStrategy().ValidateName("A_B"), ::testing::Not(IsEmpty()));
  EXPECT_THAT(ServiceStrategy().ValidateName("1abc"), ::testing::Not(IsEmpty()));
  // Namespaces are DNS labels; RBAC objects path segments ("system:..." names).
  EXPECT_THAT(NamespaceStrategy().ValidateName("a.b"), ::testing::Not(IsEmpty()));
  EXPECT_THAT(NamespaceStrategy().ValidateName("team-a"), IsEmpty());
  EXPECT_THAT(RbacStrategy().ValidateName("system:controller:lockstep"), IsEmpty());
  EXPECT_THAT(RbacStrategy().ValidateName(".."), ::testing::Not(IsEmpty()));
  EXPECT_THAT(RbacStrategy().ValidateName("a%2fb"), ::testing::Not(IsEmpty()));
}

TEST(KindStrategyTest, FieldSelectorsAreTheKindsOwn) {
  EXPECT_THAT(PodStrategy().FieldLabels(), ::testing::Contains("spec.nodeName"));
  EXPECT_THAT(PodStrategy().FieldLabels(), ::testing::Contains("status.phase"));
  EXPECT_THAT(EventStrategy().FieldLabels(), ::testing::Contains("involvedObject.uid"));
  EXPECT_THAT(SecretStrategy().FieldLabels(), ::testing::ElementsAre("type"));
  EXPECT_THAT(ServiceStrategy().FieldLabels(), IsEmpty());
}

TEST(KindStrategyTest, PodDefaultsValidationAndGracefulDeletion) {
  const ResourceType& pods = Type("", "pods");
  json pod = {
      {"spec", {{"containers", {{{"name", "c"}, {"image", "x:1"}}}}, {"restartPolicy", "Never"}}},
      {"status", {{"phase", "Running"}}}};
  PodStrategy().PrepareForCreate(pods, pod);
  ASSERT_TRUE(PodStrategy().Normalize(pods, pod, false).ok());
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");  // kept
  EXPECT_EQ(pod["spec"]["terminationGracePeriodSeconds"], 30);
  EXPECT_EQ(pod["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
  // The server's status, not the client's.
  EXPECT_EQ(pod["status"], json({{"phase", "Pending"}, {"qosClass", "BestEffort"}}));
  EXPECT_THAT(PodStrategy().Validate(pods, pod, nullptr), IsEmpty());
  // An update may change an image, and nothing else of the spec.
  json image = pod;
  image["spec"]["containers"][0]["image"] = "x:2";
  EXPECT_THAT(PodStrategy().ValidateUpdate(pods, image, pod), IsEmpty());
  json policy = pod;
  policy["spec"]["restartPolicy"] = "Always";
  ASSERT_EQ(PodStrategy().ValidateUpdate(pods, policy, pod).size(), 1u);
  EXPECT_THAT(PodStrategy().ValidateUpdate(pods, policy, pod)[0].detail,
              ::testing::HasSubstr("(changed: spec.restartPolicy)"));
  json empty = {{"spec", {{"containers", json::array()}}}};
  api::FieldErrors errors = PodStrategy().Validate(pods, empty, nullptr);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.containers");

  struct Case {
    const char* what;
    json pod;
    json options;
    std::optional<int64_t> grace;
  };
  json bound = {{"spec", {{"nodeName", "n"}, {"terminationGracePeriodSeconds", 5}}},
                {"status", {{"phase", "Running"}}}};
  json done = bound;
  done["status"]["phase"] = "Succeeded";
  json unbound = bound;
  unbound["spec"].erase("nodeName");
  std::vector<Case> cases = {
      {"running on a node: its spec's grace", bound, json::object(), 5},
      {"the request's grace wins", bound, {{"gracePeriodSeconds", 2}}, 2},
      {"grace 0 removes at once", bound, {{"gracePeriodSeconds", 0}}, std::nullopt},
      {"a finished pod goes at once", done, json::object(), std::nullopt},
      {"a pod on no node goes at once", unbound, json::object(), std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PodStrategy().GracefulDeletionPeriod(c.pod, c.options), c.grace) << c.what;
  }
  json stopping = {{"metadata", {{"deletionTimestamp", "x"}, {"deletionGracePeriodSeconds", 5}}}};
  EXPECT_TRUE(PodStrategy().AwaitsGracefulStop(stopping));
  stopping["metadata"]["deletionGracePeriodSeconds"] = 0;
  EXPECT_FALSE(PodStrategy().AwaitsGracefulStop(stopping));
  EXPECT_FALSE(ServiceStrategy().AwaitsGracefulStop(stopping));
  EXPECT_FALSE(ServiceStrategy().GracefulDeletionPeriod(bound, json::object()).has_value());
  EXPECT_THAT(ColumnNames(PodStrategy().TableColumns(pods)),
              ElementsAre("Name", "Ready", "Status", "Restarts", "Age"));
}

TEST(KindStrategyTest, PodColumnsReadContainerStatuses) {
  json pod = {{"metadata", {{"name", "p"}}},
              {"spec", {{"containers", {{{"name", "a"}}, {{"name", "b"}}}}}},
              {"status",
               {{"phase", "Running"},
                {"containerStatuses",
                 {{{"ready", true}, {"restartCount", 2}},
                  {{"ready", false},
                   {"restartCount", 1},
                   {"state", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}}}}}}}};
  std::vector<TableColumn> cols = PodStrategy().TableColumns(Type("", "pods"));
  EXPECT_EQ(cols[0].cell(pod), "p");
  EXPECT_EQ(cols[1].cell(pod), "1/2");
  EXPECT_EQ(cols[2].cell(pod), "CrashLoopBackOff");
  EXPECT_EQ(cols[3].cell(pod), "3");
  pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(cols[2].cell(pod), "Terminating");
}

TEST(KindStrategyTest, ServicesGetAClusterIpAndPortColumns) {
  const ResourceType& services = Type("", "services");
  json a = {{"spec", {{"ports", {{{"port", 2222}}, {{"port", 53}, {"protocol", "UDP"}}}}}}};
  json b = {{"spec", {{"clusterIP", "None"}}}};
  ServiceStrategy().PrepareForCreate(services, a);
  ServiceStrategy().PrepareForCreate(services, b);
  EXPECT_THAT(a["spec"]["clusterIP"].get<std::string>(), ::testing::StartsWith("10.96."));
  EXPECT_EQ(b["spec"]["clusterIP"], "None");  // headless stays headless
  std::vector<TableColumn> cols = ServiceStrategy().TableColumns(services);
  EXPECT_THAT(ColumnNames(cols), ElementsAre("Name", "Type", "Cluster-IP", "Port(s)", "Age"));
  EXPECT_EQ(cols[3].cell(a), "2222/TCP,53/UDP");
  EXPECT_EQ(cols[3].cell(b), "<none>");
}

TEST(KindStrategyTest, NamespacesAndEvents) {
  const ResourceType& namespaces = Type("", "namespaces");
  json ns = json::object();
  NamespaceStrategy().PrepareForCreate(namespaces, ns);
  EXPECT_EQ(ns["status"]["phase"], "Active");
  EXPECT_FALSE(NamespaceStrategy().DeletionWaitsForFinalizers());
  EXPECT_TRUE(PodStrategy().DeletionWaitsForFinalizers());
  std::vector<TableColumn> cols = EventStrategy().TableColumns(Type("", "events"));
  EXPECT_THAT(ColumnNames(cols), ElementsAre("Last Seen", "Type", "Reason", "Object", "Message"));
  EXPECT_EQ(cols[3].cell({{"involvedObject", {{"kind", "Pod"}, {"name", "p"}}}}), "Pod/p");
}

TEST(KindStrategyTest, CustomResourcesFollowTheirSchema) {
  ResourceType t = CustomType(true);
  const KindStrategy& s = CustomResourceStrategy();
  json obj = {{"spec", {{"extra", 1}}}, {"status", {{"x", 1}}}};
  s.PrepareForCreate(t, obj);
  EXPECT_FALSE(obj.contains("status"));  // set through /status only
  ASSERT_TRUE(s.Normalize(t, obj, /*strict_fields=*/false).ok());
  EXPECT_EQ(obj["spec"], json({{"size", 3}}));  // defaulted, the unknown field pruned
  json strict = {{"spec", {{"extra", 1}}}};
  absl::Status st = s.Normalize(t, strict, /*strict_fields=*/true);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(st.message(), HasSubstr("unknown field \"spec.extra\""));
  json small = {{"spec", {{"size", 0}}}};
  EXPECT_THAT(s.Validate(t, small, nullptr), ::testing::SizeIs(1));
  std::vector<TableColumn> cols = s.TableColumns(t);
  EXPECT_THAT(ColumnNames(cols), ElementsAre("Name", "Size"));
  EXPECT_EQ(cols[1].cell(obj), 3);
  ResourceType no_status = CustomType(false);
  json kept = {{"status", {{"x", 1}}}};
  s.PrepareForCreate(no_status, kept);
  EXPECT_TRUE(kept.contains("status"));
}

TEST(KindStrategyTest, CustomResourceDefinitionsAreCheckedAndEstablished) {
  const ResourceType& crds = Type("apiextensions.k8s.io", "customresourcedefinitions");
  const KindStrategy& s = CustomResourceDefinitionStrategy();
  json crd = {{"metadata", {{"name", "widgets.example.com"}}},
              {"spec",
               {{"group", "example.com"},
                {"names", {{"plural", "widgets"}, {"kind", "Widget"}}},
                {"versions",
                 {{{"name", "v1"},
                   {"served", true},
                   {"storage", true},
                   {"schema", {{"openAPIV3Schema", {{"type", "object"}}}}}}}}}}};
  EXPECT_THAT(s.Validate(crds, crd, nullptr), IsEmpty());
  s.Canonicalize(crds, crd);
  EXPECT_EQ(crd["status"]["storedVersions"], json({"v1"}));
  EXPECT_EQ(crd["status"]["conditions"][1]["type"], "Established");
  json wrong = crd;
  wrong["metadata"]["name"] = "gadgets.example.com";
  wrong["spec"]["versions"] = json::array();
  api::FieldErrors errors = s.Validate(crds, wrong, nullptr);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].path, "metadata.name");
  EXPECT_EQ(errors[1].path, "spec.versions");
}

}  // namespace
}  // namespace lockstep::local
