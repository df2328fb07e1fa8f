#include "operator/local/apiserver/api_server.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <random>
#include <utility>

#include "absl/strings/escaping.h"
#include "common/str_util.h"
#include "operator/api/manifest.h"
#include "operator/local/apiserver/api_server_impl.h"
#include "operator/local/apiserver/rbac.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

const char* CauseReason(api::FieldErrorType t) {
  switch (t) {
    case api::FieldErrorType::kRequired:
      return "FieldValueRequired";
    case api::FieldErrorType::kNotSupported:
      return "FieldValueNotSupported";
    case api::FieldErrorType::kDuplicate:
      return "FieldValueDuplicate";
    case api::FieldErrorType::kNotFound:
      return "FieldValueNotFound";
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

}  // namespace

ApiResponse Reply(int code, const json& body) { return {code, Dump(body), nullptr}; }

json StatusBody(int code, const std::string& reason, const std::string& message, json details) {
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

ApiResponse Fail(int code, const std::string& reason, const std::string& message, json details) {
  return Reply(code, StatusBody(code, reason, message, std::move(details)));
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

std::string Query(const std::map<std::string, std::string>& q, const char* key) {
  auto it = q.find(key);
  return it == q.end() ? "" : it->second;
}

bool QueryBool(const std::map<std::string, std::string>& q, const char* key) {
  auto it = q.find(key);
  if (it == q.end()) return false;
  std::string v = it->second;
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v != "false" && v != "0";
}

absl::StatusOr<std::optional<int64_t>> QueryInt(const std::map<std::string, std::string>& q,
                                                const char* key) {
  auto it = q.find(key);
  if (it == q.end()) return std::nullopt;
  const std::string& text = it->second;
  // strconv.ParseInt(s, 10, 64): an optional sign, then decimal digits, in range.
  size_t sign = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  bool ok = text.size() > sign &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(sign), text.end(),
                        [](char c) { return c >= '0' && c <= '9'; }) &&
            *end == '\0' && errno != ERANGE;
  if (!ok) {
    return absl::InvalidArgumentError(
        StrCat("invalid value for ", key, ": strconv.ParseInt: parsing \"", text,
               "\": ", errno == ERANGE ? "value out of range" : "invalid syntax"));
  }
  return static_cast<int64_t>(v);
}

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
    a.verb = !a.name.empty() ? "get" : QueryBool(r.query, "watch") ? "watch" : "list";
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

namespace {

// What a request body is written in: JSON (also when unnamed), YAML, or neither.
enum class BodyFormat { kJson, kYaml, kOther };
BodyFormat BodyFormatOf(const std::string& content_type) {
  std::string type = content_type.substr(0, content_type.find(';'));
  type.erase(std::remove(type.begin(), type.end(), ' '), type.end());
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (type.empty() || type == "application/json" || type == "*/*") return BodyFormat::kJson;
  if (type == "application/yaml") return BodyFormat::kYaml;
  return BodyFormat::kOther;
}

// 422 for options apimachinery's validation refuses ("CreateOptions.meta.k8s.io \"\" is
// invalid: ...").
ApiResponse InvalidOptions(const std::string& kind, const api::FieldError& e) {
  return Fail(422, "Invalid", StrCat(kind, ".meta.k8s.io \"\" is invalid: ", e.ToString()),
              {{"group", "meta.k8s.io"},
               {"kind", kind},
               {"causes",
                {{{"reason", e.type == api::FieldErrorType::kNotSupported ? "FieldValueNotSupported"
                                                                          : "FieldValueInvalid"},
                  {"message", e.ToString().substr(e.path.size() + 2)},
                  {"field", e.path}}}}});
}

}  // namespace

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
                 (route.subresource == "binding" && t.binding_subresource) ||
                 (route.subresource == "eviction" && t.eviction_subresource) ||
                 (route.subresource == "scale" && t.scale_spec_path);
    if (!known) return Fail(404, "NotFound", "the server could not find the requested resource");
  }
  const char* options_kind = r.method == "POST"    ? "CreateOptions"
                             : r.method == "PUT"   ? "UpdateOptions"
                             : r.method == "PATCH" ? "PatchOptions"
                                                   : "DeleteOptions";
  if (auto dry = r.query.find("dryRun"); dry != r.query.end() && r.method != "GET") {
    if (dry->second != "All") {
      return InvalidOptions(options_kind, api::NotSupported(api::FieldPath("dryRun"),
                                                            api::QuoteJson(dry->second), {"All"}));
    }
    route.dry_run = true;
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
  // A namespaced object lives in an existing namespace, and nothing new is made in one that
  // is being deleted (the NamespaceLifecycle admission).
  if (t.namespaced && !route.ns.empty() && r.method != "GET" && r.method != "DELETE") {
    ObjectPtr ns = s_->store_->Get(StoreKey("namespaces", "", route.ns));
    if (!ns) {
      return Fail(404, "NotFound", StrCat("namespaces \"", route.ns, "\" not found"),
                  {{"name", route.ns}, {"kind", "namespaces"}});
    }
    if (r.method == "POST" && route.subresource.empty() &&
        (*ns)["metadata"].contains("deletionTimestamp")) {
      std::string why = StrCat("unable to create new content in namespace ", route.ns,
                               " because it is being terminated");
      return Fail(403, "Forbidden", StrCat(Plural(t), " is forbidden: ", why),
                  {{"group", t.group},
                   {"kind", t.plural},
                   {"causes",
                    {{{"reason", "NamespaceTerminating"},
                      {"message", why},
                      {"field", "metadata.namespace"}}}}});
    }
  }
  auto body = [&]() -> std::variant<json, ApiResponse> {
    switch (BodyFormatOf(r.content_type)) {
      case BodyFormat::kJson: {
        json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) return Fail(400, "BadRequest", "the request body is not valid JSON");
        return j;
      }
      case BodyFormat::kYaml: {
        absl::StatusOr<std::vector<json>> docs = api::ParseYamlDocuments(r.body);
        if (!docs.ok()) {
          return Fail(400, "BadRequest",
                      StrCat("the request body is not valid YAML: ", docs.status().message()));
        }
        if (docs->size() != 1) {
          return Fail(400, "BadRequest", "the request body must be one YAML document");
        }
        return std::move((*docs)[0]);
      }
      case BodyFormat::kOther:
        break;
    }
    return Fail(415, "UnsupportedMediaType",
                StrCat("the body of the request was in an unknown format - accepted media types "
                       "include: application/json, application/yaml (got \"",
                       r.content_type, "\")"));
  };
  if (r.method == "GET") {
    if (!route.name.empty()) return Get(route, r);
    if (QueryBool(r.query, "watch")) return Watch(route, r);
    return List(route, r);
  }
  if (r.method == "POST" || r.method == "PUT") {
    std::variant<json, ApiResponse> b = body();
    if (auto* fail = std::get_if<ApiResponse>(&b)) return *fail;
    json obj = std::move(std::get<json>(b));
    if (!obj.is_object()) return Fail(400, "BadRequest", "the request body is not a JSON object");
    if (r.method == "POST") {
      if (route.subresource == "binding") return Bind(route, obj);
      if (route.subresource == "eviction") return Evict(route, obj);
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
    absl::StatusOr<std::optional<int64_t>> grace = QueryInt(r.query, "gracePeriodSeconds");
    if (!grace.ok()) return Fail(400, "BadRequest", std::string(grace.status().message()));
    if (*grace) options["gracePeriodSeconds"] = **grace;
    if (std::string policy = Query(r.query, "propagationPolicy"); !policy.empty()) {
      options["propagationPolicy"] = policy;
    }
    if (auto p = options.find("propagationPolicy"); p != options.end() && !p->is_null()) {
      std::string policy = p->is_string() ? p->get<std::string>() : p->dump();
      if (policy != "Background" && policy != "Foreground" && policy != "Orphan") {
        return InvalidOptions(
            "DeleteOptions",
            api::NotSupported(api::FieldPath("propagationPolicy"), api::QuoteJson(policy),
                              {"Foreground", "Background", "Orphan"}));
      }
    }
    if (auto g = options.find("gracePeriodSeconds");
        g != options.end() && !g->is_null() && !g->is_number_integer()) {
      return Fail(400, "BadRequest", "DeleteOptions.gracePeriodSeconds must be an integer");
    }
    // `kubectl delete --dry-run=server` sends the dry run in the body, not the query.
    if (auto d = options.find("dryRun"); d != options.end() && !d->is_null()) {
      if (!d->is_array()) return Fail(400, "BadRequest", "DeleteOptions.dryRun must be a list");
      for (const json& v : *d) {
        if (v != "All") {
          return InvalidOptions(
              "DeleteOptions",
              api::NotSupported(api::FieldPath("dryRun"),
                                api::QuoteJson(v.is_string() ? v.get<std::string>() : v.dump()),
                                {"All"}));
        }
      }
      if (!d->empty()) route.dry_run = true;
    }
    if (route.name.empty()) return DeleteCollection(route, r, options);
    return Delete(route, options);
  }
  return Fail(405, "MethodNotAllowed", StrCat("method ", r.method, " is not supported"));
}

}  // namespace lockstep::local
