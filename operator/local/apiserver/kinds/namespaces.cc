// Namespaces: names are DNS-1123 labels, Active on create, a default ServiceAccount in each.
// Deleting one puts it in Terminating while its contents are deleted (pods on a node stop
// first); it goes when the last of them has gone, and nothing new may be created in it
// meanwhile (the create check is the server's). Their metadata.finalizers do not hold up
// deletion here.

#include "common/str_util.h"
#include "operator/api/object_meta.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"
#include "operator/local/apiserver/object_util.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// Deletes everything in namespace `ns` (pods on a node are marked and stop first); true while
// anything is left.
bool DeleteAllIn(ServerContext& server, const std::string& ns) {
  for (const auto& type : server.registry().All()) {
    if (!type->namespaced) continue;
    for (const auto& [key, child] :
         server.store().List(StorePrefix(type->GroupResource(), ns)).first) {
      server.Delete(*type, ns, MetaString(*child, "name"));
    }
  }
  for (const auto& type : server.registry().All()) {
    if (type->namespaced && server.store().Any(StorePrefix(type->GroupResource(), ns))) {
      return true;
    }
  }
  return false;
}

class Namespaces final : public KindStrategy {
 public:
  std::vector<std::string> ValidateName(const std::string& name) const override {
    return api::CheckDns1123Label(name);
  }

  void PrepareForCreate(const ResourceType&, json& obj) const override {
    obj["status"] = {{"phase", "Active"}};
  }

  absl::Status AfterCreate(ServerContext& server, const json& obj) const override {
    absl::Status st = EnsureDefaultServiceAccount(server.store(), MetaString(obj, "name"));
    if (st.ok()) return st;
    return absl::Status(st.code(), StrCat("creating the default ServiceAccount: ", st.message()));
  }

  bool DeleteContents(ServerContext& server, const json& obj) const override {
    return DeleteAllIn(server, MetaString(obj, "name"));
  }

  void PrepareForDeletion(json& obj) const override {
    json& status = obj["status"];
    if (!status.is_object()) status = json::object();
    status["phase"] = "Terminating";
  }

  bool DeletionWaitsForFinalizers() const override { return false; }

  std::vector<std::string> FieldLabels() const override { return {"status.phase"}; }

  void OnRemoved(ServerContext& server, const json& obj) const override {
    std::string name = MetaString(obj, "name");
    for (const auto& type : server.registry().All()) {
      if (!type->namespaced) continue;
      for (const auto& [key, child] :
           server.store().List(StorePrefix(type->GroupResource(), name)).first) {
        server.RemoveNow(*type, key);
      }
    }
  }
};

}  // namespace

const KindStrategy& NamespaceStrategy() {
  static const Namespaces namespaces;
  return namespaces;
}

absl::Status EnsureDefaultServiceAccount(ObjectStore& store, const std::string& ns) {
  std::string key = StoreKey("serviceaccounts", ns, "default");
  if (store.Get(key)) return absl::OkStatus();
  json sa = {
      {"apiVersion", "v1"},
      {"kind", "ServiceAccount"},
      {"metadata",
       {{"name", "default"}, {"namespace", ns}, {"uid", NewUid()}, {"creationTimestamp", Now()}}}};
  absl::StatusOr<ObjectPtr> put = store.Put(key, std::move(sa), "-");
  return put.ok() || absl::IsAlreadyExists(put.status()) ? absl::OkStatus() : put.status();
}

}  // namespace lockstep::local
