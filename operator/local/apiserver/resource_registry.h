#pragma once
// The resource types the local API server serves: the built-in ones the operator and kubectl
// use, and the custom resources of every CustomResourceDefinition created on it.
// Thread-safety: thread-safe.

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::local {

struct ResourceType {
  std::string group;  // "" for core
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  std::string list_kind;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  bool namespaced = true;
  bool status_subresource = false;
  bool log_subresource = false;       // pods
  bool binding_subresource = false;   // pods: what a scheduler posts
  bool eviction_subresource = false;  // pods: the Eviction API (kubectl drain)
  // The scale subresource of a custom resource: JSON paths like
  // ".spec.replicaSpecs.Worker.replicas".
  std::optional<std::string> scale_spec_path;
  std::optional<std::string> scale_status_path;
  std::optional<std::string> scale_selector_path;
  nlohmann::json schema;  // a custom resource's openAPIV3Schema; null for built-ins
  nlohmann::json printer_columns = nlohmann::json::array();

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  // "pods" or "trainingjobs.lockstep.io": the storage key prefix, unique per type.
  std::string GroupResource() const { return group.empty() ? plural : plural + "." + group; }
  bool custom() const { return !schema.is_null(); }
};

class ResourceRegistry {
 public:
  ResourceRegistry();  // with the built-in types

  std::shared_ptr<const ResourceType> Find(const std::string& group, const std::string& version,
                                           const std::string& plural) const;
  std::shared_ptr<const ResourceType> FindByGroupResource(const std::string& group_resource) const;
  std::vector<std::shared_ptr<const ResourceType>> All() const;

  // Registers (or replaces) the served versions of a CRD; removes them with nullptr `crd`.
  void SetCustomResources(const std::string& crd_name, const nlohmann::json* crd);

 private:
  void Add(ResourceType t);

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const ResourceType>> by_path_;  // "group/version/plural"
  std::map<std::string, std::vector<std::string>> crd_paths_;           // crd name -> paths
};

}  // namespace lockstep::local
