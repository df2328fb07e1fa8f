// Namespaces: Active on create, a default ServiceAccount in each, and their contents removed
// with them. Their metadata.finalizers do not hold up deletion here.

#include "common/str_util.h"
#include "operator/local/kinds/kind_strategy.h"
#include "operator/local/object_util.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

class Namespaces final : public KindStrategy {
 public:
  void PrepareForCreate(const ResourceType&, json& obj) const override {
    obj["status"] = {{"phase", "Active"}};
  }

  absl::Status AfterCreate(ServerContext& server, const json& obj) const override {
    absl::Status st = EnsureDefaultServiceAccount(server.store(), MetaString(obj, "name"));
    if (st.ok()) return st;
    return absl::Status(st.code(), StrCat("creating the default ServiceAccount: ", st.message()));
  }

  bool DeletionWaitsForFinalizers() const override { return false; }

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
