#include "operator/local/apiserver/kinds/kind_strategy.h"

#include <map>

#include "operator/api/object_meta.h"

namespace lockstep::local {

using nlohmann::json;

std::vector<std::string> KindStrategy::ValidateName(const std::string& name) const {
  return api::CheckDns1123Subdomain(name);
}

void KindStrategy::PrepareForCreate(const ResourceType&, json&) const {}

void KindStrategy::PrepareForUpdate(const ResourceType&, json&, const json&) const {}

absl::Status KindStrategy::Normalize(const ResourceType&, json&, bool) const {
  return absl::OkStatus();
}

api::FieldErrors KindStrategy::Validate(const ResourceType&, const json&, const json*) const {
  return {};
}

api::FieldErrors KindStrategy::ValidateUpdate(const ResourceType&, const json&, const json&) const {
  return {};
}

void KindStrategy::Canonicalize(const ResourceType&, json&) const {}

absl::Status KindStrategy::AfterCreate(ServerContext&, const json&) const {
  return absl::OkStatus();
}

void KindStrategy::AfterUpdate(ServerContext&, const json&) const {}

bool KindStrategy::DeleteContents(ServerContext&, const json&) const { return false; }

std::optional<int64_t> KindStrategy::GracefulDeletionPeriod(const json&, const json&) const {
  return std::nullopt;
}

bool KindStrategy::DeletionWaitsForFinalizers() const { return true; }

void KindStrategy::PrepareForDeletion(json&) const {}

bool KindStrategy::AwaitsGracefulStop(const json&) const { return false; }

void KindStrategy::OnRemoved(ServerContext&, const json&) const {}

std::vector<std::string> KindStrategy::FieldLabels() const { return {}; }

std::vector<TableColumn> KindStrategy::TableColumns(const ResourceType&) const {
  return {NameColumn(), AgeColumn()};
}

const KindStrategy& StrategyFor(const ResourceType& type) {
  static const KindStrategy plain;
  static const std::map<std::string, const KindStrategy*> built_in = {
      {"pods", &PodStrategy()},
      {"services", &ServiceStrategy()},
      {"namespaces", &NamespaceStrategy()},
      {"events", &EventStrategy()},
      {"secrets", &SecretStrategy()},
      {"leases.coordination.k8s.io", &LeaseStrategy()},
      {"roles.rbac.authorization.k8s.io", &RbacStrategy()},
      {"rolebindings.rbac.authorization.k8s.io", &RbacStrategy()},
      {"clusterroles.rbac.authorization.k8s.io", &RbacStrategy()},
      {"clusterrolebindings.rbac.authorization.k8s.io", &RbacStrategy()},
      {"customresourcedefinitions.apiextensions.k8s.io", &CustomResourceDefinitionStrategy()},
  };
  if (type.custom()) return CustomResourceStrategy();
  auto it = built_in.find(type.GroupResource());
  return it == built_in.end() ? plain : *it->second;
}

}  // namespace lockstep::local
