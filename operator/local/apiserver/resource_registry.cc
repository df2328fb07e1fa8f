#include "operator/local/apiserver/resource_registry.h"

#include <tuple>

#include "operator/api/json_reader.h"

namespace lockstep::local {

namespace {

std::string PathKey(const std::string& group, const std::string& version,
                    const std::string& plural) {
  return group + "/" + version + "/" + plural;
}

ResourceType Builtin(std::string group, std::string version, std::string plural,
                     std::string singular, std::string kind, bool namespaced,
                     std::vector<std::string> short_names = {}) {
  ResourceType t;
  t.group = std::move(group);
  t.version = std::move(version);
  t.plural = std::move(plural);
  t.singular = std::move(singular);
  t.kind = kind;
  t.list_kind = kind + "List";
  t.namespaced = namespaced;
  t.short_names = std::move(short_names);
  t.schema = nullptr;
  return t;
}

}  // namespace

ResourceRegistry::ResourceRegistry() {
  ResourceType ns = Builtin("", "v1", "namespaces", "namespace", "Namespace", false, {"ns"});
  ns.status_subresource = true;
  Add(ns);
  ResourceType pods = Builtin("", "v1", "pods", "pod", "Pod", true, {"po"});
  pods.status_subresource = true;
  pods.log_subresource = true;
  pods.binding_subresource = true;
  pods.eviction_subresource = true;
  Add(pods);
  ResourceType services = Builtin("", "v1", "services", "service", "Service", true, {"svc"});
  services.status_subresource = true;
  Add(services);
  Add(Builtin("", "v1", "events", "event", "Event", true, {"ev"}));
  Add(Builtin("", "v1", "secrets", "secret", "Secret", true));
  Add(Builtin("", "v1", "configmaps", "configmap", "ConfigMap", true, {"cm"}));
  Add(Builtin("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, {"sa"}));
  Add(Builtin("coordination.k8s.io", "v1", "leases", "lease", "Lease", true));
  // What a Helm chart installs: the operator's Deployment (run by the deployment controller of
  // `lockstep local`), its RBAC (enforced for service-account callers) and its disruption
  // budget (stored only).
  ResourceType deployments =
      Builtin("apps", "v1", "deployments", "deployment", "Deployment", true, {"deploy"});
  deployments.status_subresource = true;
  Add(deployments);
  for (auto [plural, kind, namespaced] :
       {std::tuple{"roles", "Role", true}, std::tuple{"rolebindings", "RoleBinding", true},
        std::tuple{"clusterroles", "ClusterRole", false},
        std::tuple{"clusterrolebindings", "ClusterRoleBinding", false}}) {
    std::string singular = plural;
    singular.pop_back();
    Add(Builtin("rbac.authorization.k8s.io", "v1", plural, singular, kind, namespaced));
  }
  ResourceType pdbs = Builtin("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget",
                              "PodDisruptionBudget", true, {"pdb"});
  pdbs.status_subresource = true;
  Add(pdbs);
  ResourceType crds =
      Builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
              "CustomResourceDefinition", false, {"crd", "crds"});
  crds.status_subresource = true;
  Add(crds);
}

void ResourceRegistry::Add(ResourceType t) {
  std::string key = PathKey(t.group, t.version, t.plural);
  std::lock_guard lock(mu_);
  by_path_[key] = std::make_shared<const ResourceType>(std::move(t));
}

std::shared_ptr<const ResourceType> ResourceRegistry::Find(const std::string& group,
                                                           const std::string& version,
                                                           const std::string& plural) const {
  std::lock_guard lock(mu_);
  auto it = by_path_.find(PathKey(group, version, plural));
  return it == by_path_.end() ? nullptr : it->second;
}

std::shared_ptr<const ResourceType> ResourceRegistry::FindByGroupResource(
    const std::string& group_resource) const {
  std::lock_guard lock(mu_);
  for (const auto& [key, t] : by_path_) {
    if (t->GroupResource() == group_resource) return t;
  }
  return nullptr;
}

std::vector<std::shared_ptr<const ResourceType>> ResourceRegistry::All() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<const ResourceType>> out;
  for (const auto& [key, t] : by_path_) out.push_back(t);
  return out;
}

void ResourceRegistry::SetCustomResources(const std::string& crd_name, const nlohmann::json* crd) {
  std::vector<ResourceType> types;
  if (crd) {
    const nlohmann::json* spec = api::ObjectAt(*crd, "spec");
    const nlohmann::json* names = spec ? api::ObjectAt(*spec, "names") : nullptr;
    auto versions = spec ? spec->find("versions") : crd->end();
    if (spec && names && versions != spec->end() && versions->is_array()) {
      for (const nlohmann::json& v : *versions) {
        auto served = v.is_object() ? v.find("served") : v.end();
        if (served == v.end() || !served->is_boolean() || !served->get<bool>()) continue;
        ResourceType t;
        t.group = api::StringAt(*spec, "group");
        t.version = api::StringAt(v, "name");
        t.plural = api::StringAt(*names, "plural");
        t.singular = api::StringAt(*names, "singular");
        t.kind = api::StringAt(*names, "kind");
        t.list_kind = api::StringAt(*names, "listKind");
        if (t.list_kind.empty()) t.list_kind = t.kind + "List";
        for (const char* list : {"shortNames", "categories"}) {
          auto it = names->find(list);
          if (it == names->end() || !it->is_array()) continue;
          for (const nlohmann::json& n : *it) {
            if (n.is_string()) {
              (std::string(list) == "shortNames" ? t.short_names : t.categories)
                  .push_back(n.get<std::string>());
            }
          }
        }
        t.namespaced = api::StringAt(*spec, "scope") != "Cluster";
        const nlohmann::json* schema = api::ObjectAt(v, "schema");
        const nlohmann::json* open_api =
            schema ? api::ObjectAt(*schema, "openAPIV3Schema") : nullptr;
        t.schema = open_api ? *open_api
                            : nlohmann::json{{"type", "object"},
                                             {"x-kubernetes-preserve-unknown-fields", true}};
        if (const nlohmann::json* sub = api::ObjectAt(v, "subresources")) {
          t.status_subresource = sub->contains("status");
          if (const nlohmann::json* scale = api::ObjectAt(*sub, "scale")) {
            t.scale_spec_path = api::StringAt(*scale, "specReplicasPath");
            t.scale_status_path = api::StringAt(*scale, "statusReplicasPath");
            t.scale_selector_path = api::StringAt(*scale, "labelSelectorPath");
          }
        }
        if (auto cols = v.find("additionalPrinterColumns"); cols != v.end() && cols->is_array()) {
          t.printer_columns = *cols;
        }
        if (!t.group.empty() && !t.version.empty() && !t.plural.empty() && !t.kind.empty()) {
          types.push_back(std::move(t));
        }
      }
    }
  }
  std::lock_guard lock(mu_);
  for (const std::string& path : crd_paths_[crd_name]) by_path_.erase(path);
  crd_paths_[crd_name].clear();
  for (ResourceType& t : types) {
    std::string key = PathKey(t.group, t.version, t.plural);
    crd_paths_[crd_name].push_back(key);
    by_path_[key] = std::make_shared<const ResourceType>(std::move(t));
  }
  if (!crd) crd_paths_.erase(crd_name);
}

}  // namespace lockstep::local
