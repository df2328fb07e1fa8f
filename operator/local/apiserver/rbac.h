#pragma once
// RBAC as the Kubernetes API server evaluates it (rbac.authorization.k8s.io/v1): Roles and
// ClusterRoles hold rules; RoleBindings grant a Role or ClusterRole inside their namespace,
// ClusterRoleBindings grant a ClusterRole everywhere. A request is allowed when one bound rule
// matches its API group, resource (or "resource/subresource"), verb and, where the rule names
// any, the object's name. Rules only allow; there is no deny.
//
// Used by `lockstep local` to authorize service-account requests, and by the chart's RBAC
// coverage check to say which rule allowed each recorded call and which rules no call used.
// Thread-safety: an RbacPolicy is immutable after FromObjects.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::local {

// What a request asks to do, as the API server's authorizer sees it.
struct RequestAttributes {
  std::string user;
  std::vector<std::string> groups;
  // get, list, watch, create, update, patch, delete, deletecollection
  std::string verb;
  std::string api_group;  // "" for the core group
  std::string resource;   // plural, e.g. pods
  std::string subresource;
  std::string ns;    // "" for cluster-scoped resources and requests across namespaces
  std::string name;  // "" for collections and create
};

struct PolicyRule {
  std::vector<std::string> api_groups;
  std::vector<std::string> resources;  // "pods", "pods/log", "*", "*/scale"
  std::vector<std::string> verbs;
  std::vector<std::string> resource_names;
};

// One rule bound to a subject: where it applies and where it came from.
struct Grant {
  std::string binding;  // "ClusterRoleBinding/NAME" or "RoleBinding/NS/NAME"
  std::string role;     // "ClusterRole/NAME" or "Role/NS/NAME"
  std::string ns;       // "" for everywhere (a ClusterRoleBinding)
  size_t rule_index = 0;
  PolicyRule rule;
};

// The username of a service account, and the groups every service account is in.
std::string ServiceAccountUser(const std::string& ns, const std::string& name);
std::vector<std::string> ServiceAccountGroups(const std::string& ns);

// Whether `rule` matches the request (not looking at namespaces: that is the binding's part).
bool RuleMatches(const PolicyRule& rule, const RequestAttributes& r);

// The message Kubernetes gives with 403 Forbidden.
std::string ForbiddenMessage(const RequestAttributes& r);

class RbacPolicy {
 public:
  // From Role, ClusterRole, RoleBinding and ClusterRoleBinding objects; objects of other kinds
  // are ignored, and bindings whose role is missing grant nothing (as in Kubernetes).
  static RbacPolicy FromObjects(const std::vector<nlohmann::json>& objects);

  // Every rule bound to the user or one of its groups.
  std::vector<Grant> GrantsFor(const std::string& user,
                               const std::vector<std::string>& groups) const;
  // The first grant that allows the request; nullopt when none does.
  std::optional<Grant> Authorize(const RequestAttributes& r) const;

 private:
  struct Subject {
    std::string kind, name, ns;
  };
  struct Binding {
    std::string id, role_id, ns;  // ns "" for a ClusterRoleBinding
    std::vector<Subject> subjects;
  };
  std::vector<std::pair<std::string, std::vector<PolicyRule>>> roles_;  // by "Kind/[ns/]name"
  std::vector<Binding> bindings_;
};

}  // namespace lockstep::local
