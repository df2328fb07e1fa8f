#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/api_server_impl.h"

namespace lockstep::local {

using nlohmann::json;

absl::StatusOr<ObjectPtr> ApiServer::Impl::RemoveNow(const ResourceType& t, const std::string& key,
                                                     const std::string& policy) {
  absl::StatusOr<ObjectPtr> gone = s_->store_->Remove(key);
  if (!gone.ok()) return gone;
  StrategyFor(t).OnRemoved(*this, **gone);
  CollectDependents(MetaString(**gone, "uid"), policy);
  if (t.namespaced) FinishNamespace(MetaString(**gone, "namespace"));
  return gone;
}

void ApiServer::Impl::CollectDependents(const std::string& uid, const std::string& policy) {
  if (uid.empty()) return;
  for (const auto& [key, obj] : s_->store_->Dependents(uid)) {
    const json* meta = api::ObjectAt(*obj, "metadata");
    auto refs = meta ? meta->find("ownerReferences") : obj->end();
    if (!meta || refs == meta->end() || !refs->is_array()) continue;
    bool owned = std::any_of(refs->begin(), refs->end(),
                             [&](const json& r) { return api::StringAt(r, "uid") == uid; });
    if (!owned) continue;
    std::shared_ptr<const ResourceType> type =
        s_->registry_.FindByGroupResource(key.substr(0, key.find('/')));
    if (!type) continue;
    if (policy == "Orphan") {
      json updated = *obj;
      json kept = json::array();
      for (const json& r : *refs) {
        if (api::StringAt(r, "uid") != uid) kept.push_back(r);
      }
      updated["metadata"]["ownerReferences"] = kept;
      (void)s_->store_->Put(key, std::move(updated), MetaString(*obj, "resourceVersion"));
      continue;
    }
    Route route{type, MetaString(*obj, "namespace"), MetaString(*obj, "name"), ""};
    Delete(route, json::object());
  }
}

ApiResponse ApiServer::Impl::Delete(const Route& route, const json& options) {
  const ResourceType& t = *route.type;
  std::string key = Key(route);
  ObjectPtr old = s_->store_->Get(key);
  if (!old) return StoreError(absl::NotFoundError(""), t, route.name);
  if (const json* pre = api::ObjectAt(options, "preconditions")) {
    std::string uid = api::StringAt(*pre, "uid");
    std::string rv = api::StringAt(*pre, "resourceVersion");
    if ((!uid.empty() && uid != MetaString(*old, "uid")) ||
        (!rv.empty() && rv != MetaString(*old, "resourceVersion"))) {
      return Fail(409, "Conflict",
                  StrCat("Precondition failed: the ", Plural(t), " \"", route.name,
                         "\" is not the object the request names (uid or resourceVersion)"));
    }
  }
  std::string policy = api::StringAt(options, "propagationPolicy");
  if (policy.empty()) policy = "Background";
  const json& meta = (*old)["metadata"];
  bool already = meta.contains("deletionTimestamp");
  const KindStrategy& strategy = StrategyFor(t);
  // Marks the object for deletion (or, when it is marked already, keeps it so).
  auto mark = [&](int64_t grace, absl::Time when) -> ApiResponse {
    json marked = *old;
    marked["metadata"]["deletionTimestamp"] = api::FormatKubeTime(when);
    marked["metadata"]["deletionGracePeriodSeconds"] = grace;
    strategy.PrepareForDeletion(marked);
    if (route.dry_run) return Reply(200, marked);
    absl::StatusOr<ObjectPtr> put =
        s_->store_->Put(key, std::move(marked), MetaString(*old, "resourceVersion"));
    if (!put.ok()) return StoreError(put.status(), t, route.name);
    return Reply(200, **put);
  };
  // A namespace empties first: it stays, Terminating, until its contents have gone.
  if (!route.dry_run && strategy.DeleteContents(*this, *old)) {
    return already ? Reply(200, *old) : mark(0, absl::Now());
  }
  // Objects that must stop first (pods on a node) are marked; their stopper removes them. A
  // second delete may shorten the time they are given, never lengthen it.
  if (std::optional<int64_t> grace = strategy.GracefulDeletionPeriod(*old, options)) {
    if (!already) return mark(*grace, absl::Now() + absl::Seconds(*grace));
    auto current = meta.find("deletionGracePeriodSeconds");
    if (current != meta.end() && current->is_number_integer() && *grace < *current) {
      return mark(*grace, absl::Now() + absl::Seconds(*grace));
    }
    return Reply(200, *old);
  }
  auto finalizers = meta.find("finalizers");
  bool has_finalizers = finalizers != meta.end() && finalizers->is_array() && !finalizers->empty();
  if (has_finalizers && strategy.DeletionWaitsForFinalizers()) {
    if (already) return Reply(200, *old);
    return mark(0, absl::Now());
  }
  if (route.dry_run) return Reply(200, *old);
  if (policy == "Foreground") CollectDependents(MetaString(*old, "uid"), "Background");
  absl::StatusOr<ObjectPtr> gone = RemoveNow(t, key, policy);
  if (!gone.ok()) return StoreError(gone.status(), t, route.name);
  return Reply(200, **gone);
}

void ApiServer::Impl::FinishNamespace(const std::string& ns) {
  std::string key = StoreKey("namespaces", "", ns);
  ObjectPtr obj = s_->store_->Get(key);
  if (!obj || !(*obj)["metadata"].contains("deletionTimestamp")) return;
  std::shared_ptr<const ResourceType> type = s_->registry_.FindByGroupResource("namespaces");
  for (const auto& t : s_->registry_.All()) {
    if (t->namespaced && s_->store_->Any(StorePrefix(t->GroupResource(), ns))) return;
  }
  (void)RemoveNow(*type, key, "Background");
}

ApiResponse ApiServer::Impl::DeleteCollection(const Route& route, const ApiRequest& r,
                                              const json& options) {
  const ResourceType& t = *route.type;
  absl::StatusOr<Filter> filter = FilterOf(t, r.query);
  if (!filter.ok()) return Fail(400, "BadRequest", std::string(filter.status().message()));
  json items = json::array();
  for (const auto& [key, obj] :
       s_->store_->List(StorePrefix(t.GroupResource(), t.namespaced ? route.ns : "")).first) {
    if (!filter->Matches(*obj)) continue;
    Route one = route;
    one.ns = MetaString(*obj, "namespace");
    one.name = MetaString(*obj, "name");
    ApiResponse deleted = Delete(one, options);
    if (deleted.status == 200) items.push_back(json::parse(deleted.body, nullptr, false));
  }
  return Reply(200,
               {{"kind", t.list_kind},
                {"apiVersion", t.ApiVersion()},
                {"metadata", {{"resourceVersion", std::to_string(s_->store_->resource_version())}}},
                {"items", items}});
}

}  // namespace lockstep::local
