#pragma once
// Internal to the local API server: what its files share. Not for use outside
// operator/local. The server is split by concern:
//   api_server.cc      Create, authentication (service-account tokens), RBAC, audit, routing
//   api_crud.cc        get, log, create, update, patch, pod binding, and the generic admission
//                      of objects
//   api_list_watch.cc  label and field selectors, paginated lists, watch streams
//   api_delete.cc      deletion, finalizers, graceful deletion, cascades and garbage collection
//   api_discovery.cc   /version, /api, /apis, resource lists and OpenAPI v3
//   kinds/             one KindStrategy per kind: what differs between kinds
// Thread-safety: as ApiServer (thread-safe).

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "operator/api/field_errors.h"
#include "operator/kube/label_selector.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"
#include "operator/local/apiserver/object_util.h"
#include "operator/local/apiserver/rbac.h"

namespace lockstep::local {

// Responses in the Kubernetes form: a JSON body, or a metav1.Status for failures.
ApiResponse Reply(int code, const nlohmann::json& body);
nlohmann::json StatusBody(int code, const std::string& reason, const std::string& message,
                          nlohmann::json details = nullptr);
ApiResponse Fail(int code, const std::string& reason, const std::string& message,
                 nlohmann::json details = nullptr);
// 422 Invalid, with one cause per field error, as the Kubernetes API server words it.
ApiResponse Invalid(const ResourceType& t, const std::string& name, const api::FieldErrors& errors);

// A request's labelSelector and fieldSelector ("metadata.name=x,status.phase!=Running" over
// dotted paths).
struct FieldRequirement {
  std::vector<std::string> path;
  std::string value;
  bool equal;
};
struct Filter {
  kube::LabelSelector labels;
  std::vector<FieldRequirement> fields;

  bool Matches(const nlohmann::json& obj) const;
};
// InvalidArgument for a malformed selector, or a field the type cannot be selected by.
absl::StatusOr<Filter> FilterOf(const ResourceType& type,
                                const std::map<std::string, std::string>& query);

// A query parameter, "" when absent.
std::string Query(const std::map<std::string, std::string>& q, const char* key);
// Query parameters parsed as the Kubernetes API server parses them (apimachinery's runtime
// conversions): a bool is false when absent, "false" or "0" in any case, and true otherwise,
// "" included; an integer is Go's strconv.ParseInt, and malformed text is InvalidArgument.
bool QueryBool(const std::map<std::string, std::string>& q, const char* key);
absl::StatusOr<std::optional<int64_t>> QueryInt(const std::map<std::string, std::string>& q,
                                                const char* key);

// The autoscaling/v1 Scale view of a custom resource with a scale subresource.
nlohmann::json ScaleOf(const ResourceType& t, const nlohmann::json& obj);

// A resource request, parsed from its path.
struct Route {
  std::shared_ptr<const ResourceType> type;
  std::string ns;
  std::string name;
  std::string subresource;
  bool strict_fields = false;  // ?fieldValidation=Strict: unknown fields are errors
  bool dry_run = false;        // ?dryRun=All: admitted and answered, never stored
};

class ApiServer::Impl final : public ServerContext {
 public:
  explicit Impl(ApiServer* s) : s_(s) {}

  ApiResponse Handle(const ApiRequest& r);
  // What an authorizer sees of a resource request; nullopt for other paths (discovery,
  // /version, /healthz), which every authenticated caller may read.
  std::optional<RequestAttributes> Attributes(const ApiRequest& r);

  // ServerContext, for the kind strategies.
  ObjectStore& store() override { return *s_->store_; }
  ResourceRegistry& registry() override { return s_->registry_; }
  void RemoveNow(const ResourceType& type, const std::string& key) override {
    (void)RemoveNow(type, key, "Background");
  }
  void Delete(const ResourceType& type, const std::string& ns, const std::string& name) override {
    (void)Delete(
        Route{.type = registry().FindByGroupResource(type.GroupResource()), .ns = ns, .name = name},
        nlohmann::json::object());
  }

 private:
  // api_discovery.cc
  std::optional<ApiResponse> Discovery(const ApiRequest& r);
  ApiResponse OpenApi(const std::string& path,
                      const std::vector<std::shared_ptr<const ResourceType>>& all);
  // api_server.cc
  std::variant<Route, ApiResponse> Parse(const std::string& path);
  // api_crud.cc
  ApiResponse Get(const Route& route, const ApiRequest& r);
  ApiResponse Log(const nlohmann::json& pod, const ApiRequest& r);
  ApiResponse Create(const Route& route, nlohmann::json body);
  ApiResponse Update(const Route& route, nlohmann::json body);
  // POST pods/<name>/binding: what a scheduler does to put a pod on a node.
  ApiResponse Bind(const Route& route, const nlohmann::json& binding);
  // api_eviction.cc: POST pods/<name>/eviction (the Eviction API, PodDisruptionBudgets kept).
  ApiResponse Evict(const Route& route, const nlohmann::json& eviction);
  ApiResponse Patch(const Route& route, const ApiRequest& r);
  // Checks and fills a new or updated object; `old` is null on create.
  std::optional<ApiResponse> Admit(const Route& route, nlohmann::json& obj,
                                   const nlohmann::json* old);
  // Writes an update (after Admit) of `old`, finishing a deletion whose last finalizer went; an
  // update equal to `old` is not written.
  ApiResponse Store(const Route& route, const std::string& key, nlohmann::json obj,
                    const nlohmann::json& old, const std::string& rv, int code);
  ApiResponse StoreError(const absl::Status& s, const ResourceType& t, const std::string& name);
  // api_list_watch.cc
  ApiResponse List(const Route& route, const ApiRequest& r);
  ApiResponse Watch(const Route& route, const ApiRequest& r);
  // api_delete.cc
  ApiResponse Delete(const Route& route, const nlohmann::json& options);
  ApiResponse DeleteCollection(const Route& route, const ApiRequest& r,
                               const nlohmann::json& options);
  // Removes an object now, with what goes with it, then its dependents as `policy` says.
  absl::StatusOr<ObjectPtr> RemoveNow(const ResourceType& t, const std::string& key,
                                      const std::string& policy);
  void CollectDependents(const std::string& uid, const std::string& policy);
  // Removes namespace `ns` if it is being deleted and nothing is left in it.
  void FinishNamespace(const std::string& ns);

  std::string Key(const Route& route) const {
    return StoreKey(route.type->GroupResource(), route.type->namespaced ? route.ns : "",
                    route.name);
  }
  static uint64_t NewTokenEpoch();
  static std::string Plural(const ResourceType& t) {
    return t.group.empty() ? t.plural : t.plural + "." + t.group;
  }

  ApiServer* s_;
  // Snapshots behind paginated lists' continue tokens, newest last.
  std::mutex tokens_mu_;
  const uint64_t token_epoch_ = NewTokenEpoch();  // tells this run's tokens from another's
  uint64_t next_token_ = 1;
  struct Snapshot {
    std::vector<ObjectPtr> items;
    int64_t rv;
  };
  std::map<uint64_t, std::shared_ptr<Snapshot>> snapshots_;
};

}  // namespace lockstep::local
