#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"
#include "operator/local/apiserver/api_server_impl.h"
#include "operator/local/apiserver/kinds/builtin_types.h"
#include "operator/local/apiserver/patch.h"
#include "operator/local/apiserver/table.h"
#include "operator/local/kubelet/resolve_container.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// Everything but metadata and status: what bumps metadata.generation when it changes.
json SpecOf(const json& obj) {
  json out = obj.is_object() ? obj : json::object();
  out.erase("metadata");
  out.erase("status");
  return out;
}

// The parts of apimachinery's ValidateObjectMeta(Update) that are not the name: labels and
// annotations, owner references, and no new finalizer on an object being deleted.
void ValidateObjectMeta(const json& meta, const json* old_meta, api::FieldErrors& errors) {
  api::FieldPath path("metadata");
  for (const char* map : {"labels", "annotations"}) {
    auto it = meta.find(map);
    if (it == meta.end() || it->is_null()) continue;
    bool strings = it->is_object() &&
                   std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_string(); });
    if (!strings) {
      errors.push_back(
          api::Invalid(path.Child(map), api::RenderValue(*it), "must be a map of strings"));
      continue;
    }
    bool labels = std::string_view(map) == "labels";
    size_t total = 0;
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      for (std::string& why : api::CheckQualifiedName(kv.key())) {
        errors.push_back(api::Invalid(path.Child(map), api::QuoteJson(kv.key()), why));
      }
      std::string value = kv->get<std::string>();
      total += kv.key().size() + value.size();
      if (!labels) continue;
      for (std::string& why : api::CheckLabelValue(value)) {
        errors.push_back(api::Invalid(path.Child(map), api::QuoteJson(value), why));
      }
    }
    if (!labels && total > 256 * 1024) {
      errors.push_back({api::FieldErrorType::kTooLong, path.Child(map).str(), "",
                        "must have at most 262144 bytes"});
    }
  }
  if (auto refs = meta.find("ownerReferences"); refs != meta.end() && !refs->is_null()) {
    if (!refs->is_array()) {
      errors.push_back(
          api::Invalid(path.Child("ownerReferences"), api::RenderValue(*refs), "must be a list"));
    } else {
      std::vector<std::string> controllers;
      for (size_t i = 0; i < refs->size(); ++i) {
        const json& ref = (*refs)[i];
        api::FieldPath at = path.Child("ownerReferences").Index(i);
        for (const char* field : {"apiVersion", "kind", "name", "uid"}) {
          if (!ref.is_object() || api::StringAt(ref, field).empty()) {
            errors.push_back(
                api::Invalid(at.Child(field), "\"\"", StrCat(field, " must not be empty")));
          }
        }
        if (ref.is_object() && ref.value("controller", json()) == true) {
          controllers.push_back(
              StrCat(api::StringAt(ref, "kind"), "/", api::StringAt(ref, "name")));
        }
      }
      if (controllers.size() > 1) {
        errors.push_back(api::Invalid(
            path.Child("ownerReferences"), api::RenderValue(*refs),
            StrCat("Only one reference can have Controller set to true. Found \"true\" in "
                   "references for ",
                   StrJoin(controllers, " and "))));
      }
    }
  }
  if (old_meta && old_meta->contains("deletionTimestamp")) {
    const json empty = json::array();
    auto before = old_meta->find("finalizers");
    const json& was = before != old_meta->end() && before->is_array() ? *before : empty;
    auto after = meta.find("finalizers");
    const json& now = after != meta.end() && after->is_array() ? *after : empty;
    std::vector<std::string> added;
    for (const json& f : now) {
      if (std::find(was.begin(), was.end(), f) == was.end()) {
        added.push_back(f.is_string() ? f.get<std::string>() : f.dump());
      }
    }
    if (!added.empty()) {
      errors.push_back(api::Forbidden(
          path.Child("finalizers"),
          StrCat("no new finalizers can be added if the object is being deleted, found new "
                 "finalizers [",
                 StrJoin(added, " "), "]")));
    }
  }
}

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

// The generic part of admission, with the kind's rules in their places (kind_strategy.h
// gives the order).
std::optional<ApiResponse> ApiServer::Impl::Admit(const Route& route, json& obj, const json* old) {
  const ResourceType& t = *route.type;
  const KindStrategy& strategy = StrategyFor(t);
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
  // Decoding into the kind's Go types comes first: a value of the wrong type is a bad request.
  if (std::string bad = BuiltinTypeError(t.kind, !t.custom(), obj); !bad.empty()) {
    return Fail(400, "BadRequest",
                StrCat(t.kind, " in version \"", t.version, "\" cannot be handled as a ", t.kind,
                       ": ", bad));
  }
  json& meta = Meta(obj);
  std::string name = api::StringAt(meta, "name");
  api::FieldErrors errors;
  if (name.empty()) {
    errors.push_back(
        api::Required(api::FieldPath("metadata.name"), "name or generateName is required"));
  } else {
    for (std::string& why : strategy.ValidateName(name)) {
      errors.push_back(api::Invalid(api::FieldPath("metadata.name"), api::QuoteJson(name), why));
    }
  }
  std::string ns = api::StringAt(meta, "namespace");
  if (t.namespaced) {
    if (!ns.empty() && ns != route.ns) {
      return Fail(400, "BadRequest",
                  "the namespace of the provided object does not match the namespace sent on the "
                  "request");
    }
    meta["namespace"] = route.ns;
  } else {
    meta.erase("namespace");
  }
  ValidateObjectMeta(meta, old ? api::ObjectAt(*old, "metadata") : nullptr, errors);
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
  if (old) {
    strategy.PrepareForUpdate(t, obj, *old);
  } else {
    strategy.PrepareForCreate(t, obj);
  }
  if (absl::Status st = strategy.Normalize(t, obj, route.strict_fields); !st.ok()) {
    return Fail(400, "BadRequest", std::string(st.message()));
  }
  api::FieldErrors kind_errors = strategy.Validate(t, obj, old);
  errors.insert(errors.end(), kind_errors.begin(), kind_errors.end());
  if (old) {
    api::FieldErrors update_errors = strategy.ValidateUpdate(t, obj, *old);
    errors.insert(errors.end(), update_errors.begin(), update_errors.end());
  }
  if (!errors.empty()) return Invalid(t, name, errors);
  strategy.Canonicalize(t, obj);
  if (old && SpecOf(obj) != SpecOf(*old)) {
    Meta(obj)["generation"] = (*old)["metadata"].value("generation", int64_t{1}) + 1;
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
  if (std::optional<ApiResponse> fail = Admit(route, body, nullptr)) return *fail;
  Route named = route;
  named.name = MetaString(body, "name");
  if (route.dry_run) {
    if (s_->store_->Get(Key(named))) {
      return StoreError(absl::AlreadyExistsError(""), t, named.name);
    }
    return Reply(201, body);
  }
  absl::StatusOr<ObjectPtr> put = s_->store_->Put(Key(named), std::move(body), "-");
  if (!put.ok()) return StoreError(put.status(), t, named.name);
  if (absl::Status st = StrategyFor(t).AfterCreate(*this, **put); !st.ok()) {
    return Fail(500, "InternalError", std::string(st.message()));
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
  // A custom resource is never updated unconditionally (its strategy's
  // AllowUnconditionalUpdate is false); a Scale is applied to the object as it is.
  if (rv.empty() && t.custom() && route.subresource != "scale") {
    return Invalid(t, route.name,
                   {api::Invalid(api::FieldPath("metadata.resourceVersion"), "0x0",
                                 "must be specified for an update")});
  }
  if (rv.empty()) rv = MetaString(*old, "resourceVersion");
  // A stale resourceVersion is a conflict before anything is validated, as in Kubernetes'
  // registry: validated against a newer object, an update made from an older one could fail
  // for a change it did not make (a patch racing a binding: "may not change spec.nodeName"),
  // where a conflict lets the client (and Patch below) try again on the new one.
  if (rv != MetaString(*old, "resourceVersion")) {
    return StoreError(absl::AbortedError("stale resourceVersion"), t, route.name);
  }
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
  return Store(route, key, std::move(obj), *old, rv, 200);
}

// As pkg/registry/core/pod/storage's BindingREST: the scheduler's write of spec.nodeName, once.
ApiResponse ApiServer::Impl::Bind(const Route& route, const json& binding) {
  const json* target = api::ObjectAt(binding, "target");
  std::string node = target ? api::StringAt(*target, "name") : "";
  if (node.empty()) {
    return Fail(422, "Invalid",
                StrCat("Binding \"", route.name, "\" is invalid: target.name: Required value"));
  }
  std::string key = Key(route);
  for (int attempt = 0;; ++attempt) {
    ObjectPtr pod = s_->store_->Get(key);
    if (!pod) return StoreError(absl::NotFoundError(""), *route.type, route.name);
    const json& meta = (*pod)["metadata"];
    if (std::string uid = MetaString(binding, "uid"); !uid.empty() && uid != meta["uid"]) {
      return Fail(409, "Conflict",
                  StrCat("Precondition failed: UID in precondition: ", uid,
                         ", UID in object meta: ", meta["uid"].get<std::string>()));
    }
    std::string pod_name = StrCat(route.ns, "/", route.name);
    if (meta.contains("deletionTimestamp")) {
      return Fail(409, "Conflict",
                  StrCat("Operation cannot be fulfilled on pods/binding \"", route.name, "\": pod ",
                         pod_name, " is being deleted, cannot be assigned to a host"));
    }
    const json* spec = api::ObjectAt(*pod, "spec");
    if (spec != nullptr && spec->contains("schedulingGates") &&
        (*spec)["schedulingGates"].is_array() && !(*spec)["schedulingGates"].empty()) {
      // A gated pod waits (Kueue's admission, for one): no scheduler may place it.
      return Fail(409, "Conflict",
                  StrCat("Operation cannot be fulfilled on pods/binding \"", route.name, "\": pod ",
                         pod_name, " has non-empty .spec.schedulingGates"));
    }
    if (std::string on = spec ? api::StringAt(*spec, "nodeName") : ""; !on.empty()) {
      return Fail(409, "Conflict",
                  StrCat("Operation cannot be fulfilled on pods/binding \"", route.name, "\": pod ",
                         pod_name, " is already assigned to node \"", on, "\""));
    }
    json bound = *pod;
    bound["spec"]["nodeName"] = node;
    json& status = bound["status"];
    if (!status.is_object()) status = json::object();
    json conditions = json::array();
    if (status.contains("conditions") && status["conditions"].is_array()) {
      for (const json& c : status["conditions"]) {
        if (!c.is_object() || api::StringAt(c, "type") != "PodScheduled") conditions.push_back(c);
      }
    }
    conditions.push_back({{"type", "PodScheduled"},
                          {"status", "True"},
                          {"lastProbeTime", nullptr},
                          {"lastTransitionTime", Now()}});
    status["conditions"] = std::move(conditions);
    json success = StatusBody(201, "", "");  // what the API server answers a binding
    success.erase("reason");
    success.erase("message");
    if (route.dry_run) return Reply(201, success);
    absl::StatusOr<ObjectPtr> put =
        s_->store_->Put(key, std::move(bound), MetaString(*pod, "resourceVersion"));
    if (put.ok()) return Reply(201, success);
    if (!absl::IsAborted(put.status()) || attempt >= 4) {
      return StoreError(put.status(), *route.type, route.name);
    }
  }
}

ApiResponse ApiServer::Impl::Store(const Route& route, const std::string& key, json obj,
                                   const json& old, const std::string& rv, int code) {
  const ResourceType& t = *route.type;
  const json* meta = api::ObjectAt(obj, "metadata");
  bool deleting = meta && meta->contains("deletionTimestamp");
  auto finalizers = meta ? meta->find("finalizers") : std::as_const(obj).end();
  bool finalized =
      !meta || finalizers == meta->end() || !finalizers->is_array() || finalizers->empty();
  const KindStrategy& strategy = StrategyFor(t);
  bool stopping = strategy.AwaitsGracefulStop(obj);
  // An update that changes nothing is not written: the resourceVersion stays, and watchers
  // see no event.
  if (MetaString(old, "resourceVersion") == rv && !(deleting && finalized)) {
    json same = obj;
    Meta(same)["resourceVersion"] = rv;
    if (same == old) {
      if (route.subresource == "scale") return Reply(code, ScaleOf(t, old));
      return Reply(code, old);
    }
  }
  if (route.dry_run) {
    Meta(obj)["resourceVersion"] = rv;
    if (route.subresource == "scale") return Reply(code, ScaleOf(t, obj));
    return Reply(code, obj);
  }
  absl::StatusOr<ObjectPtr> put = s_->store_->Put(key, std::move(obj), rv);
  if (!put.ok()) return StoreError(put.status(), t, route.name);
  if (deleting && finalized && !stopping) {
    absl::StatusOr<ObjectPtr> gone = RemoveNow(t, key, "Background");
    if (gone.ok()) return Reply(code, **gone);
  }
  strategy.AfterUpdate(*this, **put);
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

}  // namespace lockstep::local
