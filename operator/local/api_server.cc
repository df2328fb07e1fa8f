#include "operator/local/api_server.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <utility>
#include <variant>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "common/str_util.h"
#include "operator/api/crd_schema.h"
#include "operator/api/field_errors.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"
#include "operator/kube/label_selector.h"
#include "operator/local/patch.h"
#include "operator/local/rbac.h"
#include "operator/local/runner.h"
#include "operator/local/table.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiResponse Reply(int code, const json& body) { return {code, Dump(body), nullptr}; }

json StatusBody(int code, const std::string& reason, const std::string& message,
                json details = nullptr) {
  json s = {{"kind", "Status"},
            {"apiVersion", "v1"},
            {"metadata", json::object()},
            {"status", code < 300 ? "Success" : "Failure"},
            {"message", message},
            {"reason", reason},
            {"code", code}};
  if (!details.is_null()) s["details"] = std::move(details);
  return s;
}

ApiResponse Fail(int code, const std::string& reason, const std::string& message,
                 json details = nullptr) {
  return Reply(code, StatusBody(code, reason, message, std::move(details)));
}

std::string Now() { return api::FormatKubeTime(absl::Now()); }

std::string RandomSuffix(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kChars[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kChars[rng() % (sizeof(kChars) - 1)];
  return out;
}

std::string NewUid() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t a = rng(), b = rng();
  return fmt::format("{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xffff, a & 0xfff,
                     (b >> 48 & 0x3fff) | 0x8000, b & 0xffffffffffff);
}

// The "default" ServiceAccount every namespace has (the service-account controller's job in
// Kubernetes), so pods that name no account get a token.
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

const char* CauseReason(api::FieldErrorType t) {
  switch (t) {
    case api::FieldErrorType::kRequired:
      return "FieldValueRequired";
    case api::FieldErrorType::kNotSupported:
      return "FieldValueNotSupported";
    case api::FieldErrorType::kDuplicate:
      return "FieldValueDuplicate";
    case api::FieldErrorType::kTooMany:
      return "FieldValueTooMany";
    case api::FieldErrorType::kTooLong:
      return "FieldValueTooLong";
    case api::FieldErrorType::kForbidden:
      return "FieldValueForbidden";
    default:
      return "FieldValueInvalid";
  }
}

// 422 Invalid, with one cause per field error, as the Kubernetes API server words it.
ApiResponse Invalid(const ResourceType& t, const std::string& name,
                    const api::FieldErrors& errors) {
  json causes = json::array();
  std::vector<std::string> parts;
  for (const api::FieldError& e : errors) {
    std::string full = e.ToString();
    std::string message = full.substr(std::min(full.size(), e.path.size() + 2));
    causes.push_back({{"reason", CauseReason(e.type)}, {"message", message}, {"field", e.path}});
    parts.push_back(full);
  }
  std::string kind = t.group.empty() ? t.kind : t.kind + "." + t.group;
  std::string message =
      StrCat(kind, " \"", name,
             "\" is invalid: ", parts.size() == 1 ? parts[0] : "[" + StrJoin(parts, ", ") + "]");
  return Fail(422, "Invalid", message,
              {{"name", name}, {"group", t.group}, {"kind", t.kind}, {"causes", causes}});
}

json& Meta(json& obj) {
  json& m = obj["metadata"];
  if (!m.is_object()) m = json::object();
  return m;
}

std::string MetaString(const json& obj, const char* key) {
  const json* m = api::ObjectAt(obj, "metadata");
  return m ? api::StringAt(*m, key) : "";
}

// Everything but metadata and status: what bumps metadata.generation when it changes.
json SpecOf(const json& obj) {
  json out = obj.is_object() ? obj : json::object();
  out.erase("metadata");
  out.erase("status");
  return out;
}

// Field selectors: "metadata.name=x,status.phase!=Running" over dotted paths.
struct FieldRequirement {
  std::vector<std::string> path;
  std::string value;
  bool equal;
};

absl::StatusOr<std::vector<FieldRequirement>> ParseFieldSelector(const std::string& text) {
  std::vector<FieldRequirement> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    if (part.empty()) continue;
    size_t op = part.find("!=");
    bool equal = op == std::string::npos;
    size_t op_len = 2;
    if (equal) {
      op = part.find("==");
      if (op == std::string::npos) {
        op = part.find('=');
        op_len = 1;
      }
    }
    if (op == std::string::npos || op == 0) {
      return absl::InvalidArgumentError(StrCat("invalid field selector \"", text, "\""));
    }
    FieldRequirement r{{}, part.substr(op + op_len), equal};
    std::string field = part.substr(0, op);
    size_t start = 0;
    while (true) {
      size_t dot = field.find('.', start);
      r.path.push_back(
          field.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string FieldValue(const json& obj, const std::vector<std::string>& path) {
  const json* at = &obj;
  for (const std::string& p : path) {
    if (!at->is_object()) return "";
    auto it = at->find(p);
    if (it == at->end()) return "";
    at = &*it;
  }
  if (at->is_string()) return at->get<std::string>();
  if (at->is_boolean() || at->is_number()) return at->dump();
  return "";
}

struct Filter {
  kube::LabelSelector labels;
  std::vector<FieldRequirement> fields;

  bool Matches(const json& obj) const {
    std::map<std::string, std::string> l;
    if (const json* m = api::ObjectAt(obj, "metadata")) {
      if (const json* ls = api::ObjectAt(*m, "labels")) {
        for (auto it = ls->begin(); it != ls->end(); ++it) {
          if (it->is_string()) l[it.key()] = it->get<std::string>();
        }
      }
    }
    if (!labels.Matches(l)) return false;
    for (const FieldRequirement& f : fields) {
      if ((FieldValue(obj, f.path) == f.value) != f.equal) return false;
    }
    return true;
  }
};

absl::StatusOr<Filter> FilterOf(const std::map<std::string, std::string>& query) {
  Filter f;
  if (auto it = query.find("labelSelector"); it != query.end()) {
    absl::StatusOr<kube::LabelSelector> s = kube::LabelSelector::Parse(it->second);
    if (!s.ok()) return s.status();
    f.labels = std::move(*s);
  }
  if (auto it = query.find("fieldSelector"); it != query.end()) {
    absl::StatusOr<std::vector<FieldRequirement>> s = ParseFieldSelector(it->second);
    if (!s.ok()) return s.status();
    f.fields = std::move(*s);
  }
  return f;
}

std::string Query(const std::map<std::string, std::string>& q, const char* key) {
  auto it = q.find(key);
  return it == q.end() ? "" : it->second;
}

// A watch response: the store's events for one collection, filtered, with bookmarks.
class CollectionWatch final : public WatchSource {
 public:
  CollectionWatch(ObjectStore* store, std::shared_ptr<Subscription> sub,
                  std::shared_ptr<const ResourceType> type, Filter filter, bool bookmarks,
                  absl::Duration bookmark_interval, absl::Duration timeout, bool tables)
      : tables_(tables),
        store_(store),
        sub_(std::move(sub)),
        type_(std::move(type)),
        filter_(std::move(filter)),
        bookmarks_(bookmarks),
        interval_(std::chrono::milliseconds(absl::ToInt64Milliseconds(bookmark_interval))),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout))),
        next_bookmark_(std::chrono::steady_clock::now() + interval_) {}

  ~CollectionWatch() override { sub_->Close(); }

  std::optional<std::string> Next() override {
    while (true) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline_) return std::nullopt;
      auto wake = std::min(
          {deadline_, bookmarks_ ? next_bookmark_ : deadline_, now + std::chrono::seconds(1)});
      std::vector<StoreEvent> events = sub_->Next(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::max(wake - now, {})));
      std::string lines = Format(events);
      if (!lines.empty()) return lines;
      if (sub_->closed()) return std::nullopt;
      now = std::chrono::steady_clock::now();
      if (now < next_bookmark_ || !bookmarks_) return std::string();  // still alive
      if (bookmarks_ && now >= next_bookmark_) {
        next_bookmark_ = now + interval_;
        // Every event up to this version has been queued to us (the store publishes under
        // the same lock); deliver any that raced in before claiming it.
        int64_t rv = store_->resource_version();
        std::string pending = Format(sub_->Next(std::chrono::milliseconds(0)));
        if (!pending.empty()) return pending;
        return Dump({{"type", "BOOKMARK"},
                     {"object",
                      {{"kind", type_->kind},
                       {"apiVersion", type_->ApiVersion()},
                       {"metadata", {{"resourceVersion", std::to_string(rv)}}}}}}) +
               "\n";
      }
    }
  }

 private:
  std::string Format(const std::vector<StoreEvent>& events) {
    std::string out;
    for (const StoreEvent& e : events) {
      bool now_in = e.type != StoreEvent::Type::kDeleted && filter_.Matches(*e.object);
      bool was_in = e.type == StoreEvent::Type::kDeleted
                        ? filter_.Matches(*e.object)
                        : (e.old_object && filter_.Matches(*e.old_object));
      const char* type = nullptr;
      if (e.type == StoreEvent::Type::kDeleted) {
        type = was_in ? "DELETED" : nullptr;
      } else if (now_in) {
        type = was_in && e.type == StoreEvent::Type::kModified ? "MODIFIED" : "ADDED";
      } else if (was_in) {
        type = "DELETED";  // it left the selector
      }
      if (!type) continue;
      // `kubectl get -w` asks for tables: each event carries a one-row Table.
      out +=
          Dump({{"type", type},
                {"object", tables_ ? ToTable(*type_, {e.object}, std::to_string(e.resource_version))
                                   : *e.object}});
      out += '\n';
    }
    return out;
  }

  bool tables_;
  ObjectStore* store_;
  std::shared_ptr<Subscription> sub_;
  std::shared_ptr<const ResourceType> type_;
  Filter filter_;
  bool bookmarks_;
  std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::steady_clock::time_point next_bookmark_;
};

}  // namespace

// The autoscaling/v1 Scale view of a custom resource with a scale subresource.
json ScaleOf(const ResourceType& t, const json& obj) {
  auto at = [&](const std::optional<std::string>& p) -> json {
    if (!p || p->empty() || (*p)[0] != '.') return nullptr;
    std::string path = *p;
    std::replace(path.begin(), path.end(), '.', '/');
    json::json_pointer pointer(path);
    return obj.contains(pointer) ? obj.at(pointer) : json(nullptr);
  };
  json spec = at(t.scale_spec_path), status = at(t.scale_status_path);
  json scale = {{"kind", "Scale"},
                {"apiVersion", "autoscaling/v1"},
                {"metadata",
                 {{"name", MetaString(obj, "name")},
                  {"namespace", MetaString(obj, "namespace")},
                  {"uid", MetaString(obj, "uid")},
                  {"resourceVersion", MetaString(obj, "resourceVersion")}}},
                {"spec", {{"replicas", spec.is_number() ? spec : json(0)}}},
                {"status", {{"replicas", status.is_number() ? status : json(0)}}}};
  json selector = at(t.scale_selector_path);
  if (selector.is_string()) scale["status"]["selector"] = selector;
  return scale;
}

struct Route {
  std::shared_ptr<const ResourceType> type;
  std::string ns;
  std::string name;
  std::string subresource;
  bool strict_fields = false;  // ?fieldValidation=Strict: unknown fields are errors
};

class ApiServer::Impl {
 public:
  explicit Impl(ApiServer* s) : s_(s) {}

  ApiResponse Handle(const ApiRequest& r);
  // What an authorizer sees of a resource request; nullopt for other paths (discovery,
  // /version, /healthz), which every authenticated caller may read.
  std::optional<RequestAttributes> Attributes(const ApiRequest& r);

 private:
  std::optional<ApiResponse> Discovery(const ApiRequest& r);
  ApiResponse OpenApi(const std::string& path,
                      const std::vector<std::shared_ptr<const ResourceType>>& all);
  std::variant<Route, ApiResponse> Parse(const std::string& path);
  ApiResponse Get(const Route& route, const ApiRequest& r);
  ApiResponse Log(const json& pod, const ApiRequest& r);
  ApiResponse List(const Route& route, const ApiRequest& r);
  ApiResponse Watch(const Route& route, const ApiRequest& r);
  ApiResponse Create(const Route& route, json body);
  ApiResponse Update(const Route& route, json body);
  ApiResponse Patch(const Route& route, const ApiRequest& r);
  ApiResponse Delete(const Route& route, const json& options);
  ApiResponse DeleteCollection(const Route& route, const ApiRequest& r);

  // Checks and fills a new or updated object; `old` is null on create.
  std::optional<ApiResponse> Admit(const Route& route, json& obj, const json* old);
  // Writes an update (after Admit), finishing a deletion whose last finalizer went.
  ApiResponse Store(const Route& route, const std::string& key, json obj, const std::string& rv,
                    int code);
  // Removes an object now, then its dependents as `policy` says.
  absl::StatusOr<ObjectPtr> RemoveNow(const ResourceType& t, const std::string& key,
                                      const std::string& policy);
  void CollectDependents(const std::string& uid, const std::string& policy);
  ApiResponse StoreError(const absl::Status& s, const ResourceType& t, const std::string& name);
  std::string Key(const Route& route) const {
    return StoreKey(route.type->GroupResource(), route.type->namespaced ? route.ns : "",
                    route.name);
  }
  std::string Plural(const ResourceType& t) const {
    return t.group.empty() ? t.plural : t.plural + "." + t.group;
  }

  ApiServer* s_;
  std::mutex tokens_mu_;
  uint64_t next_token_ = 1;
  struct Snapshot {
    std::vector<ObjectPtr> items;
    int64_t rv;
  };
  std::map<uint64_t, std::shared_ptr<Snapshot>> snapshots_;  // continue tokens, newest last
};

struct ApiServer::Auth {
  std::mutex mu;
  std::map<std::string, std::pair<std::string, std::string>> tokens;  // -> namespace, name
  std::mutex audit_mu;
  std::ofstream audit;
};

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Create(ApiServerOptions options) {
  std::unique_ptr<ApiServer> s(new ApiServer());
  s->options_ = std::move(options);
  absl::StatusOr<std::unique_ptr<ObjectStore>> store =
      ObjectStore::Open(s->options_.state_dir, s->options_.history);
  if (!store.ok()) return store.status();
  s->store_ = std::move(*store);
  s->impl_ = std::make_shared<Impl>(s.get());
  // Custom resource types of stored CRDs come back; the default namespaces always exist.
  for (const auto& [key, crd] :
       s->store_->List("customresourcedefinitions.apiextensions.k8s.io/").first) {
    s->registry_.SetCustomResources(MetaString(*crd, "name"), crd.get());
  }
  for (const char* ns : {"default", "kube-system", "kube-public"}) {
    std::string key = StoreKey("namespaces", "", ns);
    if (s->store_->Get(key)) continue;
    json obj = {{"apiVersion", "v1"},
                {"kind", "Namespace"},
                {"metadata", {{"name", ns}, {"uid", NewUid()}, {"creationTimestamp", Now()}}},
                {"spec", {{"finalizers", {"kubernetes"}}}},
                {"status", {{"phase", "Active"}}}};
    if (absl::StatusOr<ObjectPtr> put = s->store_->Put(key, obj, "-"); !put.ok()) {
      return put.status();
    }
  }
  for (const auto& [key, ns] : s->store_->List(StorePrefix("namespaces", "")).first) {
    if (absl::Status st = EnsureDefaultServiceAccount(*s->store_, MetaString(*ns, "name"));
        !st.ok()) {
      return st;
    }
  }
  s->auth_ = std::make_shared<Auth>();
  if (!s->options_.audit_log.empty()) {
    s->auth_->audit.open(s->options_.audit_log, std::ios::app);
    if (!s->auth_->audit) {
      return absl::InvalidArgumentError(
          StrCat("cannot open the audit log ", s->options_.audit_log));
    }
  }
  return s;
}

absl::StatusOr<std::string> ApiServer::IssueServiceAccountToken(const std::string& ns,
                                                                const std::string& name) {
  if (!store_->Get(StoreKey("serviceaccounts", ns, name))) {
    return absl::NotFoundError(
        StrCat("serviceaccount \"", name, "\" not found in namespace \"", ns, "\""));
  }
  std::random_device rd;
  std::string raw;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = rd();
    raw.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  std::string token = absl::WebSafeBase64Escape(raw);
  std::lock_guard lock(auth_->mu);
  auth_->tokens[token] = {ns, name};
  return token;
}

ApiResponse ApiServer::Handle(const ApiRequest& request) {
  std::string user = "system:admin";
  std::vector<std::string> groups = {"system:masters", "system:authenticated"};
  std::optional<RequestAttributes> attrs;
  ApiResponse response;
  try {
    // Only the audit log and the authorizer need them.
    if (auth_->audit.is_open() || !request.authorization.empty()) {
      attrs = impl_->Attributes(request);
    }
    std::optional<ApiResponse> refused;
    bool service_account = false;
    if (!request.authorization.empty()) {
      std::optional<std::pair<std::string, std::string>> account;
      constexpr std::string_view kBearer = "Bearer ";
      if (request.authorization.rfind(kBearer, 0) == 0) {
        std::lock_guard lock(auth_->mu);
        auto it = auth_->tokens.find(request.authorization.substr(kBearer.size()));
        if (it != auth_->tokens.end()) account = it->second;
      }
      // A token outlives its ServiceAccount no more than in Kubernetes.
      if (account && store_->Get(StoreKey("serviceaccounts", account->first, account->second))) {
        user = ServiceAccountUser(account->first, account->second);
        groups = ServiceAccountGroups(account->first);
        service_account = true;
      } else {
        user = "system:anonymous";
        groups = {"system:unauthenticated"};
        refused = Fail(401, "Unauthorized", "Unauthorized");
      }
    }
    if (!refused && service_account && attrs) {
      attrs->user = user;
      attrs->groups = groups;
      std::vector<json> rbac;
      for (const char* kind : {"roles", "clusterroles", "rolebindings", "clusterrolebindings"}) {
        for (const auto& [key, obj] :
             store_->List(StorePrefix(StrCat(kind, ".rbac.authorization.k8s.io"), "")).first) {
          rbac.push_back(*obj);
        }
      }
      if (!RbacPolicy::FromObjects(rbac).Authorize(*attrs)) {
        refused =
            Fail(403, "Forbidden", ForbiddenMessage(*attrs),
                 {{"name", attrs->name}, {"group", attrs->api_group}, {"kind", attrs->resource}});
      }
    }
    response = refused ? std::move(*refused) : impl_->Handle(request);
  } catch (const std::exception& e) {
    response = Fail(500, "InternalError", StrCat("internal error: ", e.what()));
  } catch (...) {
    response = Fail(500, "InternalError", "internal error");
  }
  if (auth_->audit.is_open()) {
    std::string uri = request.path;
    char sep = '?';
    for (const auto& [k, v] : request.query) {
      uri += StrCat(std::string(1, sep), k, "=", v);
      sep = '&';
    }
    std::string method = request.method;
    std::transform(method.begin(), method.end(), method.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    json event = {{"kind", "Event"},
                  {"apiVersion", "audit.k8s.io/v1"},
                  {"level", "Metadata"},
                  {"auditID", NewUid()},
                  {"stage", response.watch ? "ResponseStarted" : "ResponseComplete"},
                  {"requestURI", uri},
                  {"verb", attrs ? attrs->verb : method},
                  {"user", {{"username", user}, {"groups", groups}}},
                  {"userAgent", request.user_agent},
                  {"responseStatus", {{"code", response.status}}},
                  {"requestReceivedTimestamp", Now()}};
    if (attrs) {
      json ref = {{"resource", attrs->resource}};
      if (!attrs->ns.empty()) ref["namespace"] = attrs->ns;
      if (!attrs->name.empty()) ref["name"] = attrs->name;
      if (!attrs->api_group.empty()) ref["apiGroup"] = attrs->api_group;
      if (!attrs->subresource.empty()) ref["subresource"] = attrs->subresource;
      event["objectRef"] = std::move(ref);
    }
    std::string line = event.dump() + "\n";
    std::lock_guard lock(auth_->audit_mu);
    auth_->audit << line << std::flush;
  }
  return response;
}

std::optional<RequestAttributes> ApiServer::Impl::Attributes(const ApiRequest& r) {
  if (r.path == "/api" || r.path == "/apis" || r.path.rfind("/api", 0) != 0) return std::nullopt;
  std::variant<Route, ApiResponse> parsed = Parse(r.path);
  const Route* route = std::get_if<Route>(&parsed);
  if (!route) return std::nullopt;
  RequestAttributes a;
  a.api_group = route->type->group;
  a.resource = route->type->plural;
  a.subresource = route->subresource;
  a.ns = route->ns;
  a.name = route->name;
  if (r.method == "GET" || r.method == "HEAD") {
    std::string watch = Query(r.query, "watch");
    a.verb = !a.name.empty() ? "get" : (watch == "true" || watch == "1") ? "watch" : "list";
  } else if (r.method == "POST") {
    a.verb = "create";
  } else if (r.method == "PUT") {
    a.verb = "update";
  } else if (r.method == "PATCH") {
    a.verb = "patch";
  } else if (r.method == "DELETE") {
    a.verb = a.name.empty() ? "deletecollection" : "delete";
  } else {
    return std::nullopt;
  }
  return a;
}

std::variant<Route, ApiResponse> ApiServer::Impl::Parse(const std::string& path) {
  std::vector<std::string> seg;
  for (size_t pos = 1; pos <= path.size();) {
    size_t slash = path.find('/', pos);
    std::string part =
        path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    if (!part.empty()) seg.push_back(part);
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  std::string group, version;
  size_t at;
  if (seg.size() >= 3 && seg[0] == "api") {
    version = seg[1];
    at = 2;
  } else if (seg.size() >= 4 && seg[0] == "apis") {
    group = seg[1];
    version = seg[2];
    at = 3;
  } else {
    return Fail(404, "NotFound", "the server could not find the requested resource");
  }
  Route route;
  std::vector<std::string> rest(seg.begin() + static_cast<std::ptrdiff_t>(at), seg.end());
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    if (auto t = s_->registry_.Find(group, version, rest[2]); t && t->namespaced) {
      route.ns = rest[1];
      rest.erase(rest.begin(), rest.begin() + 2);
    }
  }
  route.type = s_->registry_.Find(group, version, rest[0]);
  if (!route.type || rest.size() > 3) {
    return Fail(404, "NotFound", "the server could not find the requested resource");
  }
  if (rest.size() > 1) route.name = rest[1];
  if (rest.size() > 2) route.subresource = rest[2];
  return route;
}

ApiResponse ApiServer::Impl::Handle(const ApiRequest& r) {
  if (std::optional<ApiResponse> d = Discovery(r)) return *d;
  std::variant<Route, ApiResponse> parsed = Parse(r.path);
  if (auto* fail = std::get_if<ApiResponse>(&parsed)) return *fail;
  Route route = std::get<Route>(parsed);
  route.strict_fields = Query(r.query, "fieldValidation") == "Strict";
  const ResourceType& t = *route.type;
  if (!route.subresource.empty()) {
    bool known = (route.subresource == "status" && t.status_subresource) ||
                 (route.subresource == "log" && t.log_subresource) ||
                 (route.subresource == "scale" && t.scale_spec_path);
    if (!known) return Fail(404, "NotFound", "the server could not find the requested resource");
  }
  if (r.content_type.rfind("application/vnd.kubernetes.protobuf", 0) == 0 && !r.body.empty()) {
    return Fail(415, "UnsupportedMediaType",
                "this server reads JSON, not protobuf; kubectl's imperative `create` commands send "
                "protobuf: use `kubectl apply -f` instead");
  }
  if (r.body.size() > s_->options_.max_body_bytes) {
    return Fail(413, "RequestEntityTooLarge",
                StrCat("the request body is ", r.body.size(), " bytes; the limit is ",
                       s_->options_.max_body_bytes));
  }
  // A namespaced object lives in an existing namespace.
  if (t.namespaced && !route.ns.empty() && r.method != "GET" && r.method != "DELETE" &&
      !s_->store_->Get(StoreKey("namespaces", "", route.ns))) {
    return Fail(404, "NotFound", StrCat("namespaces \"", route.ns, "\" not found"),
                {{"name", route.ns}, {"kind", "namespaces"}});
  }
  auto body = [&]() -> std::variant<json, ApiResponse> {
    json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return Fail(400, "BadRequest", "the request body is not valid JSON");
    }
    return j;
  };
  if (r.method == "GET") {
    if (!route.name.empty()) return Get(route, r);
    std::string watch = Query(r.query, "watch");
    if (watch == "true" || watch == "1") return Watch(route, r);
    return List(route, r);
  }
  if (r.method == "POST" || r.method == "PUT") {
    std::variant<json, ApiResponse> b = body();
    if (auto* fail = std::get_if<ApiResponse>(&b)) return *fail;
    json obj = std::move(std::get<json>(b));
    if (!obj.is_object()) return Fail(400, "BadRequest", "the request body is not a JSON object");
    if (r.method == "POST") {
      if (!route.name.empty()) return Fail(405, "MethodNotAllowed", "POST to a named object");
      return Create(route, std::move(obj));
    }
    if (route.name.empty()) return Fail(405, "MethodNotAllowed", "PUT needs an object name");
    return Update(route, std::move(obj));
  }
  if (r.method == "PATCH") {
    if (route.name.empty()) return Fail(405, "MethodNotAllowed", "PATCH needs an object name");
    return Patch(route, r);
  }
  if (r.method == "DELETE") {
    json options = json::object();
    if (!r.body.empty()) {
      std::variant<json, ApiResponse> b = body();
      if (auto* fail = std::get_if<ApiResponse>(&b)) return *fail;
      options = std::move(std::get<json>(b));
      if (!options.is_object()) return Fail(400, "BadRequest", "DeleteOptions must be an object");
    }
    for (const char* q : {"propagationPolicy", "gracePeriodSeconds"}) {
      std::string v = Query(r.query, q);
      if (v.empty()) continue;
      if (std::string(q) == "gracePeriodSeconds") {
        options[q] = std::atoll(v.c_str());
      } else {
        options[q] = v;
      }
    }
    if (route.name.empty()) return DeleteCollection(route, r);
    return Delete(route, options);
  }
  return Fail(405, "MethodNotAllowed", StrCat("method ", r.method, " is not supported"));
}

ApiResponse ApiServer::Impl::StoreError(const absl::Status& s, const ResourceType& t,
                                        const std::string& name) {
  std::string what = StrCat(Plural(t), " \"", name, "\"");
  json details = {{"name", name}, {"group", t.group}, {"kind", t.plural}};
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return Fail(404, "NotFound", what + " not found", details);
    case absl::StatusCode::kAlreadyExists:
      return Fail(409, "AlreadyExists", what + " already exists", details);
    case absl::StatusCode::kAborted:
      return Fail(409, "Conflict",
                  StrCat("Operation cannot be fulfilled on ", what,
                         ": the object has been modified; please apply your changes to the "
                         "latest version and try again"),
                  details);
    default:
      return Fail(500, "InternalError", std::string(s.message()));
  }
}

ApiResponse ApiServer::Impl::Get(const Route& route, const ApiRequest& r) {
  ObjectPtr obj = s_->store_->Get(Key(route));
  if (!obj) return StoreError(absl::NotFoundError(""), *route.type, route.name);
  if (route.subresource == "scale") return Reply(200, ScaleOf(*route.type, *obj));
  if (route.subresource == "log") return Log(*obj, r);
  if (WantsTable(r.accept)) {
    return Reply(200, ToTable(*route.type, {obj}, MetaString(*obj, "resourceVersion"),
                              Query(r.query, "includeObject") == "Object"));
  }
  return Reply(200, *obj);
}

// A container's log as the runner wrote it; ?container= picks one, ?tailLines= the last lines.
ApiResponse ApiServer::Impl::Log(const json& pod, const ApiRequest& r) {
  std::string container = Query(r.query, "container");
  const json* spec = api::ObjectAt(pod, "spec");
  auto containers = spec ? spec->find("containers") : std::as_const(pod).end();
  if (container.empty() && spec && containers != spec->end() && containers->is_array() &&
      !containers->empty()) {
    container = api::StringAt((*containers)[0], "name");
  }
  std::string name = MetaString(pod, "name");
  std::ifstream in(PodLogPath(s_->options_.state_dir, MetaString(pod, "namespace"), name,
                              MetaString(pod, "uid"), container));
  if (s_->options_.state_dir.empty() || !in) {
    return Fail(400, "BadRequest",
                StrCat("container \"", container, "\" in pod \"", name, "\" has not started"));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string log = text.str();
  if (std::string tail = Query(r.query, "tailLines"); !tail.empty()) {
    int64_t n = std::max<int64_t>(0, std::atoll(tail.c_str()));
    size_t pos = log.size();
    if (pos > 0 && log[pos - 1] == '\n') --pos;
    for (int64_t i = 0; i < n && pos != std::string::npos && pos > 0; ++i) {
      pos = log.rfind('\n', pos - 1);
    }
    if (pos != std::string::npos && pos > 0) log = log.substr(pos + 1);
  }
  return ApiResponse{200, std::move(log), nullptr, "text/plain"};
}

ApiResponse ApiServer::Impl::List(const Route& route, const ApiRequest& r) {
  const ResourceType& t = *route.type;
  absl::StatusOr<Filter> filter = FilterOf(r.query);
  if (!filter.ok()) return Fail(400, "BadRequest", std::string(filter.status().message()));
  int64_t limit = std::atoll(Query(r.query, "limit").c_str());
  std::string token = Query(r.query, "continue");
  std::shared_ptr<Snapshot> snap;
  size_t start = 0;
  if (!token.empty()) {
    std::string decoded;
    uint64_t id = 0;
    if (absl::Base64Unescape(token, &decoded)) {
      size_t colon = decoded.find(':');
      id = std::strtoull(decoded.c_str(), nullptr, 10);
      if (colon != std::string::npos)
        start = std::strtoull(decoded.c_str() + colon + 1, nullptr, 10);
    }
    std::lock_guard lock(tokens_mu_);
    auto it = snapshots_.find(id);
    if (it == snapshots_.end()) {
      return Fail(410, "Expired",
                  "the provided continue parameter is too old to display a consistent list "
                  "result; list again without it");
    }
    snap = it->second;
  } else {
    snap = std::make_shared<Snapshot>();
    auto [items, rv] =
        s_->store_->List(StorePrefix(t.GroupResource(), t.namespaced ? route.ns : ""));
    snap->rv = rv;
    for (auto& [key, obj] : items) {
      if (filter->Matches(*obj)) snap->items.push_back(std::move(obj));
    }
  }
  size_t end = snap->items.size();
  if (limit > 0) end = std::min(end, start + static_cast<size_t>(limit));
  json items = json::array();
  std::vector<ObjectPtr> page;
  for (size_t i = std::min(start, end); i < end; ++i) page.push_back(snap->items[i]);
  json list;
  if (WantsTable(r.accept)) {
    list = ToTable(t, page, std::to_string(snap->rv), Query(r.query, "includeObject") == "Object");
  } else {
    for (const ObjectPtr& obj : page) items.push_back(*obj);
    list = {{"kind", t.list_kind},
            {"apiVersion", t.ApiVersion()},
            {"metadata", {{"resourceVersion", std::to_string(snap->rv)}}},
            {"items", std::move(items)}};
  }
  if (end < snap->items.size()) {
    std::lock_guard lock(tokens_mu_);
    uint64_t id = next_token_++;
    snapshots_[id] = snap;
    while (snapshots_.size() > 64) snapshots_.erase(snapshots_.begin());
    list["metadata"]["continue"] = absl::Base64Escape(StrCat(id, ":", end));
    list["metadata"]["remainingItemCount"] = snap->items.size() - end;
  }
  return Reply(200, list);
}

ApiResponse ApiServer::Impl::Watch(const Route& route, const ApiRequest& r) {
  const ResourceType& t = *route.type;
  absl::StatusOr<Filter> filter = FilterOf(r.query);
  if (!filter.ok()) return Fail(400, "BadRequest", std::string(filter.status().message()));
  std::string rv_text = Query(r.query, "resourceVersion");
  std::optional<int64_t> from;
  if (!rv_text.empty() && rv_text != "0") {
    char* end = nullptr;
    long long v = std::strtoll(rv_text.c_str(), &end, 10);
    if (*end != '\0' || v < 0) {
      return Fail(400, "BadRequest", StrCat("invalid resourceVersion \"", rv_text, "\""));
    }
    from = v;
  }
  std::string prefix = StorePrefix(t.GroupResource(), t.namespaced ? route.ns : "");
  absl::StatusOr<std::shared_ptr<Subscription>> sub = s_->store_->Watch(prefix, from);
  if (!sub.ok()) {
    // As the API server does: a 200 stream whose only event is the 410 error.
    json error = StatusBody(410, "Expired", std::string(sub.status().message()));
    struct Once final : WatchSource {
      std::optional<std::string> line;
      std::optional<std::string> Next() override { return std::exchange(line, std::nullopt); }
    };
    auto once = std::make_shared<Once>();
    once->line = Dump({{"type", "ERROR"}, {"object", error}}) + "\n";
    return {200, "", once};
  }
  absl::Duration timeout = s_->options_.default_watch_timeout;
  if (std::string ts = Query(r.query, "timeoutSeconds"); !ts.empty()) {
    timeout = absl::Seconds(std::max<int64_t>(1, std::atoll(ts.c_str())));
  }
  bool bookmarks = Query(r.query, "allowWatchBookmarks") == "true";
  return {200, "",
          std::make_shared<CollectionWatch>(s_->store_.get(), *sub, route.type, *filter, bookmarks,
                                            s_->options_.bookmark_interval, timeout,
                                            WantsTable(r.accept))};
}

std::optional<ApiResponse> ApiServer::Impl::Admit(const Route& route, json& obj, const json* old) {
  const ResourceType& t = *route.type;
  std::string api_version = api::StringAt(obj, "apiVersion");
  std::string kind = api::StringAt(obj, "kind");
  if ((!api_version.empty() && api_version != t.ApiVersion()) ||
      (!kind.empty() && kind != t.kind)) {
    return Fail(400, "BadRequest",
                StrCat("the object is a ", kind.empty() ? "?" : kind, " of ",
                       api_version.empty() ? "?" : api_version, "; this endpoint takes ", t.kind,
                       " of ", t.ApiVersion()));
  }
  obj["apiVersion"] = t.ApiVersion();
  obj["kind"] = t.kind;
  json& meta = Meta(obj);
  std::string name = api::StringAt(meta, "name");
  api::FieldErrors errors;
  if (name.empty()) {
    errors.push_back(
        api::Required(api::FieldPath("metadata.name"), "name or generateName is required"));
  } else {
    std::vector<std::string> bad =
        t.plural == "services" ? api::CheckDns1035Label(name) : api::CheckDns1123Subdomain(name);
    for (std::string& why : bad) {
      errors.push_back(api::Invalid(api::FieldPath("metadata.name"), api::QuoteJson(name), why));
    }
  }
  std::string ns = api::StringAt(meta, "namespace");
  if (t.namespaced) {
    if (!ns.empty() && ns != route.ns) {
      errors.push_back(api::Invalid(api::FieldPath("metadata.namespace"), api::QuoteJson(ns),
                                    "does not match the namespace of the request"));
    }
    meta["namespace"] = route.ns;
  } else {
    meta.erase("namespace");
  }
  for (const char* map : {"labels", "annotations"}) {
    auto it = meta.find(map);
    if (it == meta.end() || it->is_null()) continue;
    bool ok = it->is_object();
    if (ok) {
      for (const json& v : *it) ok = ok && v.is_string();
    }
    if (!ok) {
      errors.push_back(api::Invalid(api::FieldPath("metadata").Child(map), api::RenderValue(*it),
                                    "must be a map of strings"));
    }
  }
  if (old) {
    // Fields the server owns.
    const json& old_meta = (*old)["metadata"];
    for (const char* k : {"uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"}) {
      if (old_meta.contains(k)) {
        meta[k] = old_meta[k];
      } else {
        meta.erase(k);
      }
    }
  } else {
    meta["uid"] = NewUid();
    meta["creationTimestamp"] = Now();
    meta["generation"] = 1;
    for (const char* k : {"deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"}) {
      meta.erase(k);
    }
  }
  meta.erase("managedFields");
  if (t.custom()) {
    api::ApplySchemaDefaults(t.schema, &obj);
    std::vector<std::string> unknown = api::PruneUnknownFields(t.schema, &obj);
    if (route.strict_fields && !unknown.empty()) {
      std::vector<std::string> parts;
      for (const std::string& u : unknown) parts.push_back(StrCat("unknown field \"", u, "\""));
      return Fail(400, "BadRequest", StrCat("strict decoding error: ", StrJoin(parts, ", ")));
    }
    api::FieldErrors schema_errors = api::ValidateAgainstSchema(t.schema, obj, api::FieldPath());
    errors.insert(errors.end(), schema_errors.begin(), schema_errors.end());
  }
  if (t.plural == "customresourcedefinitions") {
    const json* spec = api::ObjectAt(obj, "spec");
    const json* names = spec ? api::ObjectAt(*spec, "names") : nullptr;
    std::string want =
        names ? StrCat(api::StringAt(*names, "plural"), ".", api::StringAt(*spec, "group")) : "";
    if (!names || want != name) {
      errors.push_back(
          api::Invalid(api::FieldPath("metadata.name"), api::QuoteJson(name),
                       StrCat("must be spec.names.plural+\".\"+spec.group (", want, ")")));
    }
    auto versions = spec ? spec->find("versions") : std::as_const(obj).end();
    if (!spec || versions == spec->end() || !versions->is_array() || versions->empty()) {
      errors.push_back(
          api::Required(api::FieldPath("spec.versions"), "must have at least one version"));
    } else {
      for (size_t i = 0; i < versions->size(); ++i) {
        const json* schema = api::ObjectAt((*versions)[i], "schema");
        const json* open_api = schema ? api::ObjectAt(*schema, "openAPIV3Schema") : nullptr;
        if (!open_api) continue;
        api::FieldErrors e = api::CheckStructuralSchema(
            *open_api,
            api::FieldPath("spec.versions").Index(i).Child("schema").Child("openAPIV3Schema"));
        errors.insert(errors.end(), e.begin(), e.end());
      }
    }
    if (errors.empty() && names) {
      obj["status"] = {{"acceptedNames", *names},
                       {"storedVersions", json::array()},
                       {"conditions",
                        {{{"type", "NamesAccepted"},
                          {"status", "True"},
                          {"reason", "NoConflicts"},
                          {"lastTransitionTime", Now()}},
                         {{"type", "Established"},
                          {"status", "True"},
                          {"reason", "InitialNamesAccepted"},
                          {"lastTransitionTime", Now()}}}}};
      for (const json& v : *versions) {
        if (v.is_object() && v.contains("storage") && v["storage"] == true) {
          obj["status"]["storedVersions"].push_back(v.value("name", ""));
        }
      }
    }
  }
  if (t.plural == "pods") {
    json& spec = obj["spec"];
    if (!spec.is_object() || !spec.contains("containers") || !spec["containers"].is_array() ||
        spec["containers"].empty()) {
      errors.push_back(api::Required(api::FieldPath("spec.containers"), "a pod needs a container"));
    } else if (!old) {
      if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Always";
      if (!spec.contains("terminationGracePeriodSeconds"))
        spec["terminationGracePeriodSeconds"] = 30;
      obj["status"] = {{"phase", "Pending"}};
    }
  }
  if (t.plural == "services" && !old) {
    json& spec = obj["spec"];
    if (!spec.is_object()) spec = json::object();
    if (!spec.contains("clusterIP")) {
      static std::atomic<uint32_t> next_ip{1};
      uint32_t n = next_ip++;
      spec["clusterIP"] = StrCat("10.96.", (n >> 8) & 255, ".", n & 255);
    }
  }
  if (t.plural == "namespaces" && !old) obj["status"] = {{"phase", "Active"}};
  if (!errors.empty()) return Invalid(t, name, errors);
  if (old && SpecOf(obj) != SpecOf(*old)) {
    meta["generation"] = (*old)["metadata"].value("generation", int64_t{1}) + 1;
  }
  return std::nullopt;
}

ApiResponse ApiServer::Impl::Create(const Route& route, json body) {
  const ResourceType& t = *route.type;
  json& meta = Meta(body);
  if (api::StringAt(meta, "name").empty()) {
    std::string prefix = api::StringAt(meta, "generateName");
    if (!prefix.empty()) meta["name"] = prefix + RandomSuffix(5);
  }
  if (t.custom() && t.status_subresource) body.erase("status");  // set through /status only
  if (std::optional<ApiResponse> fail = Admit(route, body, nullptr)) return *fail;
  Route named = route;
  named.name = MetaString(body, "name");
  absl::StatusOr<ObjectPtr> put = s_->store_->Put(Key(named), std::move(body), "-");
  if (!put.ok()) return StoreError(put.status(), t, named.name);
  if (t.plural == "customresourcedefinitions") {
    s_->registry_.SetCustomResources(named.name, put->get());
  }
  if (t.plural == "namespaces" && t.group.empty()) {
    if (absl::Status st = EnsureDefaultServiceAccount(*s_->store_, named.name); !st.ok()) {
      return Fail(500, "InternalError",
                  StrCat("creating the default ServiceAccount: ", st.message()));
    }
  }
  return Reply(201, **put);
}

ApiResponse ApiServer::Impl::Update(const Route& route, json body) {
  const ResourceType& t = *route.type;
  std::string key = Key(route);
  ObjectPtr old = s_->store_->Get(key);
  if (!old) return StoreError(absl::NotFoundError(""), t, route.name);
  std::string body_name = MetaString(body, "name");
  if (!body_name.empty() && body_name != route.name) {
    return Fail(400, "BadRequest",
                StrCat("the name of the object (", body_name,
                       ") does not match the name on the URL (", route.name, ")"));
  }
  Meta(body)["name"] = route.name;
  std::string rv = MetaString(body, "resourceVersion");
  if (rv.empty()) rv = MetaString(*old, "resourceVersion");
  json obj;
  if (route.subresource == "status") {
    obj = *old;
    if (body.contains("status")) {
      obj["status"] = body["status"];
    } else {
      obj.erase("status");
    }
  } else if (route.subresource == "scale") {
    obj = *old;
    const json* spec = api::ObjectAt(body, "spec");
    auto replicas = spec ? spec->find("replicas") : std::as_const(body).end();
    if (!spec || replicas == spec->end() || !replicas->is_number_integer()) {
      return Fail(422, "Invalid", "Scale.spec.replicas must be an integer");
    }
    std::string path = *t.scale_spec_path;
    std::replace(path.begin(), path.end(), '.', '/');
    obj[json::json_pointer(path)] = *replicas;
  } else {
    obj = std::move(body);
    if (t.status_subresource) {
      if (old->contains("status")) {
        obj["status"] = (*old)["status"];
      } else {
        obj.erase("status");
      }
    }
  }
  Route main = route;
  main.subresource.clear();
  if (std::optional<ApiResponse> fail = Admit(main, obj, old.get())) return *fail;
  return Store(route, key, std::move(obj), rv, 200);
}

ApiResponse ApiServer::Impl::Store(const Route& route, const std::string& key, json obj,
                                   const std::string& rv, int code) {
  const ResourceType& t = *route.type;
  const json* meta = api::ObjectAt(obj, "metadata");
  bool deleting = meta && meta->contains("deletionTimestamp");
  auto finalizers = meta ? meta->find("finalizers") : std::as_const(obj).end();
  bool finalized =
      !meta || finalizers == meta->end() || !finalizers->is_array() || finalizers->empty();
  bool graceful_pod = t.plural == "pods" && deleting &&
                      meta->contains("deletionGracePeriodSeconds") &&
                      (*meta)["deletionGracePeriodSeconds"] != 0;
  absl::StatusOr<ObjectPtr> put = s_->store_->Put(key, std::move(obj), rv);
  if (!put.ok()) return StoreError(put.status(), t, route.name);
  if (deleting && finalized && !graceful_pod) {
    absl::StatusOr<ObjectPtr> gone = RemoveNow(t, key, "Background");
    if (gone.ok()) return Reply(code, **gone);
  }
  if (t.plural == "customresourcedefinitions") {
    s_->registry_.SetCustomResources(route.name, put->get());
  }
  if (route.subresource == "scale") return Reply(code, ScaleOf(t, **put));
  return Reply(code, **put);
}

ApiResponse ApiServer::Impl::Patch(const Route& route, const ApiRequest& r) {
  const ResourceType& t = *route.type;
  std::optional<PatchFormat> format = PatchFormatOf(r.content_type);
  if (!format) {
    return Fail(415, "UnsupportedMediaType",
                StrCat("the body of the request was in an unknown format - accepted media types "
                       "include: application/json-patch+json, application/merge-patch+json, "
                       "application/strategic-merge-patch+json (got \"",
                       r.content_type, "\")"));
  }
  if (*format == PatchFormat::kStrategicMerge && t.custom()) {
    return Fail(415, "UnsupportedMediaType",
                "strategic merge patch is not supported for custom resources; use a merge patch");
  }
  json patch = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (patch.is_discarded()) return Fail(400, "BadRequest", "the patch is not valid JSON");
  std::string key = Key(route);
  for (int attempt = 0;; ++attempt) {
    ObjectPtr old = s_->store_->Get(key);
    if (!old) return StoreError(absl::NotFoundError(""), t, route.name);
    json base = route.subresource == "scale" ? ScaleOf(t, *old) : *old;
    absl::StatusOr<json> patched = ApplyPatch(*format, base, patch);
    if (!patched.ok()) {
      if (patched.status().code() == absl::StatusCode::kFailedPrecondition) {
        return Fail(422, "Invalid", std::string(patched.status().message()));
      }
      return Fail(400, "BadRequest", std::string(patched.status().message()));
    }
    if (!patched->is_object()) return Fail(400, "BadRequest", "the patch did not yield an object");
    // A resourceVersion in the patch is a precondition; otherwise retry on races.
    std::string wanted = MetaString(patch.is_object() ? patch : json::object(), "resourceVersion");
    json body = std::move(*patched);
    if (wanted.empty()) Meta(body)["resourceVersion"] = MetaString(*old, "resourceVersion");
    ApiResponse out = Update(route, std::move(body));
    if (out.status != 409 || !wanted.empty() || attempt >= 4 ||
        out.body.find("\"Conflict\"") == std::string::npos) {
      return out;
    }
  }
}

absl::StatusOr<ObjectPtr> ApiServer::Impl::RemoveNow(const ResourceType& t, const std::string& key,
                                                     const std::string& policy) {
  absl::StatusOr<ObjectPtr> gone = s_->store_->Remove(key);
  if (!gone.ok()) return gone;
  std::string name = MetaString(**gone, "name");
  if (t.plural == "customresourcedefinitions") {
    // Its custom resources go with it.
    std::vector<std::string> prefixes;
    for (const auto& type : s_->registry_.All()) {
      if (type->custom() && type->GroupResource() == name) prefixes.push_back(name + "/");
    }
    s_->registry_.SetCustomResources(name, nullptr);
    for (const std::string& prefix : prefixes) {
      for (const auto& [k, obj] : s_->store_->List(prefix).first) (void)s_->store_->Remove(k);
    }
  }
  if (t.plural == "namespaces") {
    for (const auto& type : s_->registry_.All()) {
      if (!type->namespaced) continue;
      for (const auto& [k, obj] :
           s_->store_->List(StorePrefix(type->GroupResource(), name)).first) {
        (void)RemoveNow(*type, k, "Background");
      }
    }
  }
  CollectDependents(MetaString(**gone, "uid"), policy);
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
  if (policy != "Background" && policy != "Foreground" && policy != "Orphan") {
    return Fail(
        400, "BadRequest",
        StrCat("propagationPolicy \"", policy, "\": want Foreground, Background or Orphan"));
  }
  const json& meta = (*old)["metadata"];
  bool already = meta.contains("deletionTimestamp");
  // Pods on a node stop gracefully: mark them, and the runner removes them once stopped.
  if (t.plural == "pods") {
    const json* spec = api::ObjectAt(*old, "spec");
    int64_t grace = 30;
    if (spec && spec->contains("terminationGracePeriodSeconds") &&
        (*spec)["terminationGracePeriodSeconds"].is_number_integer()) {
      grace = (*spec)["terminationGracePeriodSeconds"].get<int64_t>();
    }
    if (options.contains("gracePeriodSeconds") &&
        options["gracePeriodSeconds"].is_number_integer()) {
      grace = options["gracePeriodSeconds"].get<int64_t>();
    }
    std::string phase =
        MetaString(json{{"metadata", (*old).value("status", json::object())}}, "phase");
    bool running = spec && !api::StringAt(*spec, "nodeName").empty() && phase != "Succeeded" &&
                   phase != "Failed";
    if (running && grace > 0) {
      if (already) return Reply(200, *old);
      json marked = *old;
      marked["metadata"]["deletionTimestamp"] =
          api::FormatKubeTime(absl::Now() + absl::Seconds(grace));
      marked["metadata"]["deletionGracePeriodSeconds"] = grace;
      absl::StatusOr<ObjectPtr> put =
          s_->store_->Put(key, std::move(marked), MetaString(*old, "resourceVersion"));
      if (!put.ok()) return StoreError(put.status(), t, route.name);
      return Reply(200, **put);
    }
  }
  auto finalizers = meta.find("finalizers");
  bool has_finalizers = finalizers != meta.end() && finalizers->is_array() && !finalizers->empty();
  if (has_finalizers && t.plural != "namespaces") {
    if (already) return Reply(200, *old);
    json marked = *old;
    marked["metadata"]["deletionTimestamp"] = Now();
    marked["metadata"]["deletionGracePeriodSeconds"] = 0;
    absl::StatusOr<ObjectPtr> put =
        s_->store_->Put(key, std::move(marked), MetaString(*old, "resourceVersion"));
    if (!put.ok()) return StoreError(put.status(), t, route.name);
    return Reply(200, **put);
  }
  if (policy == "Foreground") CollectDependents(MetaString(*old, "uid"), "Background");
  absl::StatusOr<ObjectPtr> gone = RemoveNow(t, key, policy);
  if (!gone.ok()) return StoreError(gone.status(), t, route.name);
  return Reply(200, **gone);
}

ApiResponse ApiServer::Impl::DeleteCollection(const Route& route, const ApiRequest& r) {
  const ResourceType& t = *route.type;
  absl::StatusOr<Filter> filter = FilterOf(r.query);
  if (!filter.ok()) return Fail(400, "BadRequest", std::string(filter.status().message()));
  json items = json::array();
  for (const auto& [key, obj] :
       s_->store_->List(StorePrefix(t.GroupResource(), t.namespaced ? route.ns : "")).first) {
    if (!filter->Matches(*obj)) continue;
    Route one{route.type, MetaString(*obj, "namespace"), MetaString(*obj, "name"), ""};
    ApiResponse deleted = Delete(one, json::object());
    if (deleted.status == 200) items.push_back(json::parse(deleted.body, nullptr, false));
  }
  return Reply(200,
               {{"kind", t.list_kind},
                {"apiVersion", t.ApiVersion()},
                {"metadata", {{"resourceVersion", std::to_string(s_->store_->resource_version())}}},
                {"items", items}});
}

std::optional<ApiResponse> ApiServer::Impl::Discovery(const ApiRequest& r) {
  if (r.method != "GET") return std::nullopt;
  const std::string& p = r.path;
  if (p == "/healthz" || p == "/readyz" || p == "/livez") {
    return ApiResponse{200, "ok", nullptr, "text/plain"};
  }
  if (p == "/version") {
    return Reply(200, {{"major", "1"},
                       {"minor", "32"},
                       {"gitVersion", "v1.32.0-lockstep"},
                       {"platform", "linux/amd64"}});
  }
  if (p == "/api") {
    return Reply(200, {{"kind", "APIVersions"},
                       {"versions", {"v1"}},
                       {"serverAddressByClientCIDRs",
                        {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", "127.0.0.1"}}}}});
  }
  std::vector<std::shared_ptr<const ResourceType>> all = s_->registry_.All();
  if (p == "/openapi/v3" || p.rfind("/openapi/v3/", 0) == 0) return OpenApi(p, all);
  if (p == "/apis") {
    std::map<std::string, std::vector<std::string>> groups;
    for (const auto& t : all) {
      if (t->group.empty()) continue;
      auto& versions = groups[t->group];
      if (std::find(versions.begin(), versions.end(), t->version) == versions.end()) {
        versions.push_back(t->version);
      }
    }
    json list = json::array();
    for (const auto& [group, versions] : groups) {
      json vs = json::array();
      for (const std::string& v : versions) {
        vs.push_back({{"groupVersion", group + "/" + v}, {"version", v}});
      }
      list.push_back({{"name", group}, {"versions", vs}, {"preferredVersion", vs[0]}});
    }
    return Reply(200, {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", list}});
  }
  std::string group, version;
  if (p.rfind("/api/", 0) == 0 && p.find('/', 5) == std::string::npos) {
    version = p.substr(5);
  } else if (p.rfind("/apis/", 0) == 0) {
    std::string rest = p.substr(6);
    size_t slash = rest.find('/');
    if (slash == std::string::npos || rest.find('/', slash + 1) != std::string::npos) {
      return std::nullopt;
    }
    group = rest.substr(0, slash);
    version = rest.substr(slash + 1);
  } else {
    return std::nullopt;
  }
  json resources = json::array();
  for (const auto& t : all) {
    if (t->group != group || t->version != version) continue;
    resources.push_back(
        {{"name", t->plural},
         {"singularName", t->singular},
         {"namespaced", t->namespaced},
         {"kind", t->kind},
         {"verbs",
          {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}},
         {"shortNames", t->short_names},
         {"categories", t->categories}});
    if (t->status_subresource) {
      resources.push_back({{"name", t->plural + "/status"},
                           {"singularName", ""},
                           {"namespaced", t->namespaced},
                           {"kind", t->kind},
                           {"verbs", {"get", "patch", "update"}}});
    }
    if (t->log_subresource) {
      resources.push_back({{"name", t->plural + "/log"},
                           {"singularName", ""},
                           {"namespaced", t->namespaced},
                           {"kind", t->kind},
                           {"verbs", {"get"}}});
    }
    if (t->scale_spec_path) {
      resources.push_back({{"name", t->plural + "/scale"},
                           {"singularName", ""},
                           {"namespaced", t->namespaced},
                           {"group", "autoscaling"},
                           {"version", "v1"},
                           {"kind", "Scale"},
                           {"verbs", {"get", "patch", "update"}}});
    }
  }
  if (resources.empty())
    return Fail(404, "NotFound", "the server could not find the requested resource");
  return Reply(200, {{"kind", "APIResourceList"},
                     {"apiVersion", "v1"},
                     {"groupVersion", group.empty() ? version : group + "/" + version},
                     {"resources", resources}});
}

// OpenAPI v3, only as far as kubectl needs it: every group-version's document lists the
// collection and object paths with their PATCH operation tagged by group-version-kind and
// taking `fieldValidation`, which tells kubectl to let the server validate fields. Schemas are
// not published (custom resources are validated here, against their CRD).
ApiResponse ApiServer::Impl::OpenApi(const std::string& path,
                                     const std::vector<std::shared_ptr<const ResourceType>>& all) {
  if (path == "/openapi/v3") {
    json paths = json::object();
    for (const auto& t : all) {
      std::string gv =
          t->group.empty() ? "api/" + t->version : "apis/" + t->group + "/" + t->version;
      paths[gv] = {{"serverRelativeURL", "/openapi/v3/" + gv}};
    }
    return Reply(200, {{"paths", paths}});
  }
  std::string gv = path.substr(sizeof("/openapi/v3/") - 1);
  json paths = json::object();
  for (const auto& t : all) {
    std::string mine =
        t->group.empty() ? "api/" + t->version : "apis/" + t->group + "/" + t->version;
    if (mine != gv) continue;
    json gvk = {{"group", t->group}, {"version", t->version}, {"kind", t->kind}};
    json params = json::array(
        {{{"name", "fieldValidation"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
         {{"name", "fieldManager"}, {"in", "query"}, {"schema", {{"type", "string"}}}}});
    json op = {{"x-kubernetes-group-version-kind", gvk},
               {"parameters", params},
               {"responses", {{"200", {{"description", "OK"}}}}}};
    std::string base = "/" + mine + (t->namespaced ? "/namespaces/{namespace}/" : "/") + t->plural;
    paths[base] = {{"post", op}};
    paths[base + "/{name}"] = {{"patch", op}, {"put", op}};
  }
  if (paths.empty())
    return Fail(404, "NotFound", "the server could not find the requested resource");
  return Reply(200, {{"openapi", "3.0.0"},
                     {"info", {{"title", "Lockstep local"}, {"version", "v1.32.0"}}},
                     {"paths", paths},
                     {"components", {{"schemas", json::object()}}}});
}

}  // namespace lockstep::local
