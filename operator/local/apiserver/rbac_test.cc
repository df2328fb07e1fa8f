// RBAC evaluation, and the API server's authentication, authorization and audit log.
#include "operator/local/apiserver/rbac.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "operator/local/apiserver/api_server.h"

namespace lockstep::local {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

RequestAttributes Attrs(std::string verb, std::string group, std::string resource,
                        std::string ns = "default", std::string name = "",
                        std::string subresource = "") {
  RequestAttributes r;
  r.user = ServiceAccountUser("ops", "operator");
  r.groups = ServiceAccountGroups("ops");
  r.verb = std::move(verb);
  r.api_group = std::move(group);
  r.resource = std::move(resource);
  r.ns = std::move(ns);
  r.name = std::move(name);
  r.subresource = std::move(subresource);
  return r;
}

TEST(RbacTest, RuleMatchingFollowsKubernetes) {
  PolicyRule pods{{""}, {"pods", "pods/log"}, {"get", "list"}, {}};
  EXPECT_TRUE(RuleMatches(pods, Attrs("get", "", "pods", "default", "p")));
  EXPECT_TRUE(RuleMatches(pods, Attrs("get", "", "pods", "default", "p", "log")));
  EXPECT_FALSE(RuleMatches(pods, Attrs("get", "", "pods", "default", "p", "status")));
  EXPECT_FALSE(RuleMatches(pods, Attrs("delete", "", "pods", "default", "p")));
  EXPECT_FALSE(RuleMatches(pods, Attrs("get", "apps", "pods", "default", "p")));
  PolicyRule any_scale{{"*"}, {"*/scale"}, {"*"}, {}};
  EXPECT_TRUE(RuleMatches(any_scale, Attrs("update", "apps", "deployments", "x", "d", "scale")));
  EXPECT_FALSE(RuleMatches(any_scale, Attrs("update", "apps", "deployments", "x", "d")));
  PolicyRule named{{"coordination.k8s.io"}, {"leases"}, {"get", "update"}, {"lock"}};
  EXPECT_TRUE(RuleMatches(named, Attrs("get", "coordination.k8s.io", "leases", "ops", "lock")));
  EXPECT_FALSE(RuleMatches(named, Attrs("get", "coordination.k8s.io", "leases", "ops", "other")));
  // A name list never covers a request without a name.
  EXPECT_FALSE(RuleMatches(named, Attrs("list", "coordination.k8s.io", "leases", "ops")));
}

json Role(const std::string& kind, const std::string& ns, const std::string& name,
          const json& rules) {
  json meta = {{"name", name}};
  if (!ns.empty()) meta["namespace"] = ns;
  return {{"kind", kind}, {"metadata", meta}, {"rules", rules}};
}

json Binding(const std::string& kind, const std::string& ns, const std::string& name,
             const std::string& role_kind, const std::string& role, const json& subjects) {
  json meta = {{"name", name}};
  if (!ns.empty()) meta["namespace"] = ns;
  return {{"kind", kind},
          {"metadata", meta},
          {"roleRef", {{"kind", role_kind}, {"name", role}}},
          {"subjects", subjects}};
}

const json kOperator =
    json::array({{{"kind", "ServiceAccount"}, {"name", "operator"}, {"namespace", "ops"}}});
const json kPodRules = json::parse(R"([{"apiGroups":[""],"resources":["pods"],"verbs":["list"]}])");

TEST(RbacTest, ClusterRoleBindingGrantsEverywhereRoleBindingInItsNamespace) {
  RbacPolicy cluster = RbacPolicy::FromObjects(
      {Role("ClusterRole", "", "pods", kPodRules),
       Binding("ClusterRoleBinding", "", "b", "ClusterRole", "pods", kOperator)});
  EXPECT_TRUE(cluster.Authorize(Attrs("list", "", "pods", "team-a")));
  EXPECT_TRUE(cluster.Authorize(Attrs("list", "", "pods", "")));  // all namespaces
  std::optional<Grant> g = cluster.Authorize(Attrs("list", "", "pods", "team-b"));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->binding, "ClusterRoleBinding/b");
  EXPECT_EQ(g->role, "ClusterRole/pods");

  // A ClusterRole bound by a RoleBinding, and a Role: both only in the binding's namespace.
  for (const auto& [role_kind, role_ns] :
       {std::pair<std::string, std::string>{"ClusterRole", ""}, {"Role", "team-a"}}) {
    RbacPolicy scoped = RbacPolicy::FromObjects(
        {Role(role_kind, role_ns, "pods", kPodRules),
         Binding("RoleBinding", "team-a", "b", role_kind, "pods", kOperator)});
    EXPECT_TRUE(scoped.Authorize(Attrs("list", "", "pods", "team-a"))) << role_kind;
    EXPECT_FALSE(scoped.Authorize(Attrs("list", "", "pods", "team-b"))) << role_kind;
    EXPECT_FALSE(scoped.Authorize(Attrs("list", "", "pods", ""))) << role_kind;
  }
}

TEST(RbacTest, SubjectsMustMatch) {
  RbacPolicy p = RbacPolicy::FromObjects(
      {Role("ClusterRole", "", "pods", kPodRules),
       Binding("ClusterRoleBinding", "", "other-sa", "ClusterRole", "pods",
               json::parse(R"([{"kind":"ServiceAccount","name":"operator","namespace":"x"}])")),
       Binding("ClusterRoleBinding", "", "user", "ClusterRole", "pods",
               json::parse(R"([{"kind":"User","name":"alice"}])"))});
  EXPECT_FALSE(p.Authorize(Attrs("list", "", "pods")));
  RbacPolicy by_group = RbacPolicy::FromObjects(
      {Role("ClusterRole", "", "pods", kPodRules),
       Binding("ClusterRoleBinding", "", "g", "ClusterRole", "pods",
               json::parse(R"([{"kind":"Group","name":"system:serviceaccounts:ops"}])"))});
  EXPECT_TRUE(by_group.Authorize(Attrs("list", "", "pods")));
  // A binding whose role does not exist grants nothing; a ClusterRoleBinding cannot bind a Role.
  RbacPolicy dangling = RbacPolicy::FromObjects(
      {Binding("ClusterRoleBinding", "", "b", "ClusterRole", "missing", kOperator),
       Role("Role", "default", "pods", kPodRules),
       Binding("ClusterRoleBinding", "", "c", "Role", "pods", kOperator)});
  EXPECT_FALSE(dangling.Authorize(Attrs("list", "", "pods")));
  EXPECT_TRUE(dangling.GrantsFor(ServiceAccountUser("ops", "operator"), {}).empty());
}

TEST(RbacTest, ForbiddenMessageIsKubernetes) {
  EXPECT_EQ(ForbiddenMessage(Attrs("list", "", "secrets", "default")),
            "secrets is forbidden: User \"system:serviceaccount:ops:operator\" cannot list "
            "resource \"secrets\" in API group \"\" in the namespace \"default\"");
  EXPECT_EQ(ForbiddenMessage(Attrs("update", "lockstep.io", "trainingjobs", "", "j", "status")),
            "trainingjobs.lockstep.io \"j\" is forbidden: User "
            "\"system:serviceaccount:ops:operator\" cannot update resource "
            "\"trainingjobs/status\" in API group \"lockstep.io\" at the cluster scope");
}

// The API server: tokens, RBAC enforcement for service accounts, and the audit log.
class ApiAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    audit_ = fs::temp_directory_path() / ("lockstep-audit-" + std::to_string(::getpid()));
    fs::remove(audit_);
    api_ = ApiServer::Create({.audit_log = audit_.string()}).value();
  }
  void TearDown() override { fs::remove(audit_); }
  ApiResponse Call(const std::string& method, const std::string& path, const std::string& token,
                   const json& body = nullptr) {
    return api_->Handle({.method = method,
                         .path = path,
                         .content_type = "application/json",
                         .body = body.is_null() ? "" : body.dump(),
                         .authorization = token.empty() ? "" : "Bearer " + token,
                         .user_agent = "test"});
  }
  void Apply(const std::string& path, const json& obj) {
    ASSERT_EQ(Call("POST", path, "", obj).status, 201) << obj.dump();
  }
  std::vector<json> AuditLines() {
    std::vector<json> out;
    std::ifstream in(audit_);
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }

  fs::path audit_;
  std::unique_ptr<ApiServer> api_;
};

TEST_F(ApiAuthTest, EveryNamespaceHasADefaultServiceAccount) {
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/default/serviceaccounts/default", "").status, 200);
  Apply("/api/v1/namespaces",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "team-a"}}}});
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/team-a/serviceaccounts/default", "").status, 200);
  EXPECT_TRUE(api_->IssueServiceAccountToken("team-a", "default").ok());
  absl::StatusOr<std::string> none = api_->IssueServiceAccountToken("team-a", "nobody");
  EXPECT_TRUE(absl::IsNotFound(none.status()));
  EXPECT_NE(none.status().message().find("serviceaccount \"nobody\" not found"), std::string::npos);
}

TEST_F(ApiAuthTest, ServiceAccountsGetWhatTheirBindingsAllowAndNothingElse) {
  std::string token = api_->IssueServiceAccountToken("default", "default").value();
  ApiResponse denied = Call("GET", "/api/v1/namespaces/default/pods", token);
  EXPECT_EQ(denied.status, 403);
  EXPECT_NE(denied.body.find("User \\\"system:serviceaccount:default:default\\\" cannot list "
                             "resource \\\"pods\\\""),
            std::string::npos)
      << denied.body;
  // Discovery is open to every authenticated caller.
  EXPECT_EQ(Call("GET", "/api", token).status, 200);
  Apply("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
        Role("Role", "default", "pod-reader", kPodRules));
  Apply("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        Binding("RoleBinding", "default", "read", "Role", "pod-reader",
                json::parse(R"([{"kind":"ServiceAccount","name":"default"}])")));
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/default/pods", token).status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/pods", token).status, 403);  // all namespaces: not granted
  EXPECT_EQ(Call("DELETE", "/api/v1/namespaces/default/pods", token).status, 403);
  // The administrator (no token) may do anything; an unknown token is 401.
  EXPECT_EQ(Call("GET", "/api/v1/pods", "").status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/default/pods", "forged").status, 401);
  // A token dies with its ServiceAccount.
  EXPECT_EQ(Call("DELETE", "/api/v1/namespaces/default/serviceaccounts/default", "").status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/default/pods", token).status, 401);
}

TEST_F(ApiAuthTest, AuditLogRecordsWhoDidWhat) {
  std::string token = api_->IssueServiceAccountToken("default", "default").value();
  Call("GET", "/api/v1/namespaces/default/secrets", token);
  Call("GET", "/apis/apps/v1/namespaces/default/deployments/d/status", "");
  Call("PATCH", "/api/v1/namespaces/default/pods/p", "forged", json::object());
  Call("GET", "/version", "");
  std::vector<json> lines = AuditLines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["apiVersion"], "audit.k8s.io/v1");
  EXPECT_EQ(lines[0]["user"]["username"], "system:serviceaccount:default:default");
  EXPECT_EQ(lines[0]["verb"], "list");
  EXPECT_EQ(lines[0]["objectRef"], json::parse(R"({"resource":"secrets","namespace":"default"})"));
  EXPECT_EQ(lines[0]["responseStatus"]["code"], 403);
  EXPECT_EQ(lines[0]["userAgent"], "test");
  EXPECT_EQ(lines[1]["user"]["username"], "system:admin");
  EXPECT_EQ(lines[1]["verb"], "get");
  EXPECT_EQ(lines[1]["objectRef"]["subresource"], "status");
  EXPECT_EQ(lines[1]["objectRef"]["apiGroup"], "apps");
  EXPECT_EQ(lines[1]["objectRef"]["name"], "d");
  EXPECT_EQ(lines[2]["user"]["username"], "system:anonymous");
  EXPECT_EQ(lines[2]["verb"], "patch");
  EXPECT_EQ(lines[2]["responseStatus"]["code"], 401);
  EXPECT_FALSE(lines[3].contains("objectRef"));
  EXPECT_EQ(lines[3]["verb"], "get");
}

TEST_F(ApiAuthTest, AnUnwritableAuditLogIsAnError) {
  absl::StatusOr<std::unique_ptr<ApiServer>> s =
      ApiServer::Create({.audit_log = "/nonexistent/dir/audit.log"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/dir/audit.log"), std::string::npos);
}

}  // namespace
}  // namespace lockstep::local
