#pragma once
// KindStrategy: the rules of one kind of object in the local API server, apart from the
// generic store that serves every kind (as k8s.io/apiserver's registry/generic store and a
// strategy per kind, pkg/registry/core/pod/strategy.go). The store calls, in this order:
//  - on create: ValidateName, PrepareForCreate (defaults and server-set fields), Normalize
//    (schema defaults and pruning), Validate, Canonicalize, then AfterCreate once stored;
//  - on update: ValidateName, PrepareForUpdate (what the server allocated stays), Normalize,
//    Validate, ValidateUpdate (immutable fields),
//    Canonicalize, then AfterUpdate once stored;
//  - on delete: DeleteContents (a namespace empties first), GracefulDeletionPeriod (pods stop
//    before they go), DeletionWaitsForFinalizers, PrepareForDeletion (fields of an object
//    marked for deletion), AwaitsGracefulStop (a finalized object still stopping stays),
//    OnRemoved once removed (what goes with it), then the ownerReference cascade, which is the
//    store's;
//  - on list and watch: FieldLabels (what a fieldSelector may name);
//  - on `kubectl get`: TableColumns.
// Every hook has the default of a plain kind (ConfigMaps, ServiceAccounts): names are DNS-1123
// subdomains, nothing else is checked or done. Strategies hold no state.
// Thread-safety: every method may be called from any thread at once.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "operator/api/field_errors.h"
#include "operator/local/apiserver/object_store.h"
#include "operator/local/apiserver/resource_registry.h"
#include "operator/local/apiserver/table.h"

namespace lockstep::local {

// What a kind's rules may reach of the rest of the server.
class ServerContext {
 public:
  virtual ~ServerContext() = default;
  virtual ObjectStore& store() = 0;
  virtual ResourceRegistry& registry() = 0;
  // Removes the object at `key` now, with what goes with it and its dependents.
  virtual void RemoveNow(const ResourceType& type, const std::string& key) = 0;
  // Deletes an object as a DELETE request would (a pod on a node is marked and stops first).
  virtual void Delete(const ResourceType& type, const std::string& ns, const std::string& name) = 0;
};

class KindStrategy {
 public:
  virtual ~KindStrategy() = default;

  // What is wrong with metadata.name (nothing: empty).
  virtual std::vector<std::string> ValidateName(const std::string& name) const;
  // Defaults and server-set fields of a new object, before validation.
  virtual void PrepareForCreate(const ResourceType& type, nlohmann::json& obj) const;
  // What an update keeps of the old object when the new one leaves it out.
  virtual void PrepareForUpdate(const ResourceType& type, nlohmann::json& obj,
                                const nlohmann::json& old) const;
  // Defaults and pruning that a schema implies; InvalidArgument (400) for unknown fields when
  // the request asked for strict field validation.
  virtual absl::Status Normalize(const ResourceType& type, nlohmann::json& obj,
                                 bool strict_fields) const;
  // Field errors of a new (`old` null) or updated object.
  virtual api::FieldErrors Validate(const ResourceType& type, const nlohmann::json& obj,
                                    const nlohmann::json* old) const;
  // Field errors of an update that changes what may not change.
  virtual api::FieldErrors ValidateUpdate(const ResourceType& type, const nlohmann::json& obj,
                                          const nlohmann::json& old) const;
  // Server-computed fields of a valid object (a CRD's status).
  virtual void Canonicalize(const ResourceType& type, nlohmann::json& obj) const;
  // After a create or update is stored; a failed AfterCreate answers 500.
  virtual absl::Status AfterCreate(ServerContext& server, const nlohmann::json& obj) const;
  virtual void AfterUpdate(ServerContext& server, const nlohmann::json& obj) const;

  // Deletes what must go before the object does (a namespace's contents); true while some of
  // it is still there, and the object is then marked for deletion and stays.
  virtual bool DeleteContents(ServerContext& server, const nlohmann::json& obj) const;
  // Seconds the object is given to stop before it is removed (pods on a node); nullopt to
  // remove it as soon as nothing else holds it.
  virtual std::optional<int64_t> GracefulDeletionPeriod(const nlohmann::json& obj,
                                                        const nlohmann::json& options) const;
  // Whether metadata.finalizers hold up deletion (they do, but for namespaces here).
  virtual bool DeletionWaitsForFinalizers() const;
  // Fields of an object being marked for deletion (a namespace's Terminating phase).
  virtual void PrepareForDeletion(nlohmann::json& obj) const;
  // Whether an object marked for deletion is still stopping (its stopper removes it).
  virtual bool AwaitsGracefulStop(const nlohmann::json& obj) const;
  // What goes with a removed object (a CRD's custom resources, a namespace's contents).
  virtual void OnRemoved(ServerContext& server, const nlohmann::json& obj) const;

  // Fields a fieldSelector may name besides metadata.name and metadata.namespace.
  virtual std::vector<std::string> FieldLabels() const;

  virtual std::vector<TableColumn> TableColumns(const ResourceType& type) const;
};

// The strategy of a resource type: its custom-resource rules if it has a schema, else the
// built-in kind's, else the plain kind's.
const KindStrategy& StrategyFor(const ResourceType& type);

// The default ServiceAccount every namespace has (the service-account controller's job in
// Kubernetes), so pods that name no account get a token.
absl::Status EnsureDefaultServiceAccount(ObjectStore& store, const std::string& ns);

// One per file in this folder.
const KindStrategy& PodStrategy();
const KindStrategy& ServiceStrategy();
const KindStrategy& NamespaceStrategy();
const KindStrategy& EventStrategy();
const KindStrategy& SecretStrategy();
const KindStrategy& LeaseStrategy();
const KindStrategy& RbacStrategy();
const KindStrategy& CustomResourceDefinitionStrategy();
const KindStrategy& CustomResourceStrategy();

}  // namespace lockstep::local
