#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "operator/local/apiserver/api_server_impl.h"

#ifndef LOCKSTEP_LOCAL_VERSION
#define LOCKSTEP_LOCAL_VERSION "dev"
#endif

namespace lockstep::local {

using nlohmann::json;

namespace {

// "2026-11-24T00:00:00Z" from the compiler's __DATE__ ("Nov 24 2026").
std::string BuildDate() {
  static const char* kMonths = "JanFebMarAprMayJunJulAugSepOctNovDec";
  std::string date = __DATE__;
  int month = static_cast<int>(std::string(kMonths).find(date.substr(0, 3)) / 3) + 1;
  int day = std::atoi(date.substr(4, 2).c_str());
  char out[32];
  std::snprintf(out, sizeof out, "%s-%02d-%02dT00:00:00Z", date.substr(7, 4).c_str(), month, day);
  return out;
}

const std::string kBuildDate = BuildDate();
#if defined(__clang__)
const std::string kCompiler = "clang " __clang_version__;
#elif defined(__GNUC__)
const std::string kCompiler = "gcc " __VERSION__;
#else
const std::string kCompiler = "c++";
#endif
#if defined(__x86_64__)
const std::string kPlatform = "linux/amd64";
#elif defined(__aarch64__)
const std::string kPlatform = "linux/arm64";
#else
const std::string kPlatform = "linux";
#endif

}  // namespace

std::optional<ApiResponse> ApiServer::Impl::Discovery(const ApiRequest& r) {
  if (r.method != "GET") return std::nullopt;
  // "/version/" is "/version", as the API server's router takes it (client libraries ask so).
  std::string p = r.path;
  if (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p == "/healthz" || p == "/readyz" || p == "/livez") {
    return ApiResponse{200, "ok", nullptr, "text/plain"};
  }
  if (p == "/metrics" && s_->options_.metrics) {
    return ApiResponse{200, s_->options_.metrics(), nullptr, "text/plain; version=0.0.4"};
  }
  if (p == "/version") {
    // Every field of apimachinery's version.Info: kubectl and the client libraries read them
    // all (the Python client refuses an answer without one). This server is not built by Go:
    // goVersion and compiler say what built it.
    return Reply(200, {{"major", "1"},
                       {"minor", "32"},
                       {"gitVersion", "v1.32.0-lockstep"},
                       {"gitCommit", "lockstep-" LOCKSTEP_LOCAL_VERSION},
                       {"gitTreeState", "clean"},
                       {"buildDate", kBuildDate},
                       {"goVersion", "none"},
                       {"compiler", kCompiler},
                       {"platform", kPlatform}});
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
  // /apis/<group>: one group, as /apis lists it.
  if (p.rfind("/apis/", 0) == 0 && p.find('/', 6) == std::string::npos) {
    std::string group = p.substr(6);
    json versions = json::array();
    for (const auto& t : all) {
      if (t->group != group) continue;
      json v = {{"groupVersion", group + "/" + t->version}, {"version", t->version}};
      if (std::find(versions.begin(), versions.end(), v) == versions.end()) versions.push_back(v);
    }
    if (versions.empty()) {
      return Fail(404, "NotFound", "the server could not find the requested resource");
    }
    return Reply(200, {{"kind", "APIGroup"},
                       {"apiVersion", "v1"},
                       {"name", group},
                       {"versions", versions},
                       {"preferredVersion", versions[0]}});
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
    if (t->binding_subresource) {
      resources.push_back({{"name", t->plural + "/binding"},
                           {"singularName", ""},
                           {"namespaced", t->namespaced},
                           {"kind", "Binding"},
                           {"verbs", json::array({"create"})}});
    }
    if (t->eviction_subresource) {
      resources.push_back({{"name", t->plural + "/eviction"},
                           {"singularName", ""},
                           {"namespaced", t->namespaced},
                           {"group", "policy"},
                           {"version", "v1"},
                           {"kind", "Eviction"},
                           {"verbs", json::array({"create"})}});
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
// taking `fieldValidation`, which tells kubectl to let the server validate fields; a custom
// resource's schema (its CRD's) is published under components.schemas, named and tagged as the
// Kubernetes API server names it ("io.lockstep.v1alpha1.TrainingJob"), which `kubectl explain`
// reads. Built-in kinds' schemas are not published.
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
  json schemas = json::object();
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
    if (t->custom()) {
      // The group reversed: lockstep.io -> io.lockstep.
      std::string name;
      for (std::string_view rest = t->group; !rest.empty();) {
        const size_t dot = rest.rfind('.');
        name += std::string(dot == std::string_view::npos ? rest : rest.substr(dot + 1)) + ".";
        rest = dot == std::string_view::npos ? std::string_view() : rest.substr(0, dot);
      }
      json schema = t->schema;
      schema["x-kubernetes-group-version-kind"] = json::array({gvk});
      schemas[name + t->version + "." + t->kind] = std::move(schema);
    }
  }
  if (paths.empty())
    return Fail(404, "NotFound", "the server could not find the requested resource");
  return Reply(200, {{"openapi", "3.0.0"},
                     {"info", {{"title", "Lockstep local"}, {"version", "v1.32.0"}}},
                     {"paths", paths},
                     {"components", {{"schemas", std::move(schemas)}}}});
}

}  // namespace lockstep::local
