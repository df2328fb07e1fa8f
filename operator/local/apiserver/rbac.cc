#include "operator/local/apiserver/rbac.h"

#include <algorithm>

#include "common/str_util.h"
#include "operator/api/json_reader.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

bool Has(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

std::string Meta(const json& obj, const char* key) {
  const json* meta = api::ObjectAt(obj, "metadata");
  return meta ? api::StringAt(*meta, key) : "";
}

bool ResourceMatches(const std::vector<std::string>& resources, const std::string& resource,
                     const std::string& subresource) {
  std::string combined = subresource.empty() ? resource : resource + "/" + subresource;
  for (const std::string& r : resources) {
    if (r == "*" || r == combined) return true;
    if (!subresource.empty() && r == "*/" + subresource) return true;
  }
  return false;
}

}  // namespace

std::string ServiceAccountUser(const std::string& ns, const std::string& name) {
  return StrCat("system:serviceaccount:", ns, ":", name);
}

std::vector<std::string> ServiceAccountGroups(const std::string& ns) {
  return {"system:serviceaccounts", StrCat("system:serviceaccounts:", ns), "system:authenticated"};
}

bool RuleMatches(const PolicyRule& rule, const RequestAttributes& r) {
  if (!Has(rule.verbs, "*") && !Has(rule.verbs, r.verb)) return false;
  if (!Has(rule.api_groups, "*") && !Has(rule.api_groups, r.api_group)) return false;
  if (!ResourceMatches(rule.resources, r.resource, r.subresource)) return false;
  if (!rule.resource_names.empty()) {
    // A name list cannot cover requests without a name (list, watch, create).
    if (r.name.empty() || !Has(rule.resource_names, r.name)) return false;
  }
  return true;
}

std::string ForbiddenMessage(const RequestAttributes& r) {
  std::string resource = r.subresource.empty() ? r.resource : r.resource + "/" + r.subresource;
  std::string what = r.api_group.empty() ? r.resource : r.resource + "." + r.api_group;
  if (!r.name.empty()) what += " \"" + r.name + "\"";
  std::string where = r.ns.empty() ? " at the cluster scope" : " in the namespace \"" + r.ns + "\"";
  return StrCat(what, " is forbidden: User \"", r.user, "\" cannot ", r.verb, " resource \"",
                resource, "\" in API group \"", r.api_group, "\"", where);
}

RbacPolicy RbacPolicy::FromObjects(const std::vector<json>& objects) {
  RbacPolicy p;
  for (const json& o : objects) {
    if (!o.is_object()) continue;
    std::string kind = api::StringAt(o, "kind");
    std::string name = Meta(o, "name");
    std::string ns = Meta(o, "namespace");
    if (kind == "Role" || kind == "ClusterRole") {
      std::vector<PolicyRule> rules;
      if (auto it = o.find("rules"); it != o.end() && it->is_array()) {
        for (const json& r : *it) {
          if (!r.is_object()) continue;
          rules.push_back({api::StringsAt(r, "apiGroups"), api::StringsAt(r, "resources"),
                           api::StringsAt(r, "verbs"), api::StringsAt(r, "resourceNames")});
        }
      }
      std::string id = kind == "Role" ? StrCat("Role/", ns, "/", name) : "ClusterRole/" + name;
      p.roles_.emplace_back(id, std::move(rules));
    } else if (kind == "RoleBinding" || kind == "ClusterRoleBinding") {
      Binding b;
      b.ns = kind == "RoleBinding" ? ns : "";
      b.id = kind == "RoleBinding" ? StrCat("RoleBinding/", ns, "/", name)
                                   : "ClusterRoleBinding/" + name;
      const json* ref = api::ObjectAt(o, "roleRef");
      std::string ref_kind = ref ? api::StringAt(*ref, "kind") : "";
      std::string ref_name = ref ? api::StringAt(*ref, "name") : "";
      if (ref_kind == "ClusterRole") {
        b.role_id = "ClusterRole/" + ref_name;
      } else if (ref_kind == "Role" && kind == "RoleBinding") {
        b.role_id = StrCat("Role/", ns, "/", ref_name);
      } else {
        continue;  // a ClusterRoleBinding cannot bind a Role
      }
      if (auto it = o.find("subjects"); it != o.end() && it->is_array()) {
        for (const json& s : *it) {
          if (!s.is_object()) continue;
          Subject subject{api::StringAt(s, "kind"), api::StringAt(s, "name"),
                          api::StringAt(s, "namespace")};
          // A ServiceAccount subject without a namespace means the binding's own.
          if (subject.kind == "ServiceAccount" && subject.ns.empty()) subject.ns = ns;
          b.subjects.push_back(std::move(subject));
        }
      }
      p.bindings_.push_back(std::move(b));
    }
  }
  return p;
}

std::vector<Grant> RbacPolicy::GrantsFor(const std::string& user,
                                         const std::vector<std::string>& groups) const {
  std::vector<Grant> out;
  for (const Binding& b : bindings_) {
    bool bound = std::any_of(b.subjects.begin(), b.subjects.end(), [&](const Subject& s) {
      if (s.kind == "ServiceAccount") return user == ServiceAccountUser(s.ns, s.name);
      if (s.kind == "User") return user == s.name;
      if (s.kind == "Group") return Has(groups, s.name);
      return false;
    });
    if (!bound) continue;
    auto role = std::find_if(roles_.begin(), roles_.end(),
                             [&](const auto& r) { return r.first == b.role_id; });
    if (role == roles_.end()) continue;
    for (size_t i = 0; i < role->second.size(); ++i) {
      out.push_back({b.id, b.role_id, b.ns, i, role->second[i]});
    }
  }
  return out;
}

std::optional<Grant> RbacPolicy::Authorize(const RequestAttributes& r) const {
  for (Grant& g : GrantsFor(r.user, r.groups)) {
    // A RoleBinding's rules apply in its namespace only.
    if (!g.ns.empty() && g.ns != r.ns) continue;
    if (RuleMatches(g.rule, r)) return std::move(g);
  }
  return std::nullopt;
}

}  // namespace lockstep::local
