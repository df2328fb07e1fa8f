#include "operator/kube/kube_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/manifest.h"

namespace lockstep::kube {
namespace {

namespace fs = std::filesystem;
using api::ObjectAt;
using api::StringAt;
using nlohmann::json;

constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct File {
  std::string path;
  json doc;
};

// The first entry named `name` in `list` across the files, with the file it came from.
std::pair<const json*, const File*> FindNamed(const std::vector<File>& files, const char* list,
                                              const std::string& name) {
  for (const File& f : files) {
    auto l = f.doc.find(list);
    if (l == f.doc.end() || !l->is_array()) continue;
    for (const json& entry : *l) {
      if (entry.is_object() && StringAt(entry, "name") == name) {
        return {&entry, &f};
      }
    }
  }
  return {nullptr, nullptr};
}

// Reads `key`-data (base64) or `key` (a file path, relative to the kubeconfig's folder).
absl::Status ReadPem(const json& obj, const std::string& key, const File& file, std::string* out) {
  std::string data = StringAt(obj, key + "-data");
  if (!data.empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(data, &decoded)) {
      return absl::InvalidArgumentError(StrCat(file.path, ": ", key, "-data is not base64"));
    }
    *out = std::move(decoded);
    return absl::OkStatus();
  }
  std::string path = StringAt(obj, key);
  if (path.empty()) return absl::OkStatus();
  fs::path p(path);
  if (p.is_relative()) p = fs::path(file.path).parent_path() / p;
  absl::StatusOr<std::string> text = ReadFile(p.string());
  if (!text.ok())
    return absl::InvalidArgumentError(StrCat(file.path, ": ", key, ": ", text.status().message()));
  *out = std::move(*text);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RestConfig> LoadKubeconfig(const std::vector<std::string>& paths,
                                          const std::string& context) {
  std::vector<File> files;
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) continue;  // as kubectl: missing files in $KUBECONFIG are skipped
    absl::StatusOr<std::vector<json>> docs = api::ParseYamlDocuments(*text);
    if (!docs.ok()) {
      return absl::InvalidArgumentError(StrCat(path, ": ", docs.status().message()));
    }
    if (docs->empty() || (*docs)[0].is_null()) continue;  // an empty file is an empty config
    if (!(*docs)[0].is_object()) {
      return absl::InvalidArgumentError(StrCat(path, ": not a kubeconfig (want a YAML mapping)"));
    }
    files.push_back({path, std::move((*docs)[0])});
  }
  if (files.empty()) {
    return absl::NotFoundError(StrCat("no kubeconfig found at ", StrJoin(paths, ":")));
  }
  std::string context_name = context;
  for (const File& f : files) {
    if (!context_name.empty()) break;
    context_name = StringAt(f.doc, "current-context");
  }
  if (context_name.empty()) {
    return absl::InvalidArgumentError(
        StrCat(files[0].path, ": no current-context is set and no context was named"));
  }
  auto [ctx_entry, ctx_file] = FindNamed(files, "contexts", context_name);
  const json* ctx_object = ctx_entry ? ObjectAt(*ctx_entry, "context") : nullptr;
  if (!ctx_object) {
    return absl::InvalidArgumentError(
        StrCat("kubeconfig: context \"", context_name, "\" not found"));
  }
  const json& ctx = *ctx_object;
  RestConfig config;
  config.source = StrCat("kubeconfig ", ctx_file->path, " context ", context_name);
  if (std::string ns = StringAt(ctx, "namespace"); !ns.empty()) config.namespace_ = ns;

  std::string cluster_name = StringAt(ctx, "cluster");
  auto [cluster_entry, cluster_file] = FindNamed(files, "clusters", cluster_name);
  const json* cluster_object = cluster_entry ? ObjectAt(*cluster_entry, "cluster") : nullptr;
  if (!cluster_object) {
    return absl::InvalidArgumentError(StrCat("kubeconfig: context \"", context_name,
                                             "\" names cluster \"", cluster_name,
                                             "\", which is not defined"));
  }
  const json& cluster = *cluster_object;
  config.server = StringAt(cluster, "server");
  if (config.server.empty()) {
    return absl::InvalidArgumentError(
        StrCat(cluster_file->path, ": cluster \"", cluster_name, "\" has no server"));
  }
  if (auto it = cluster.find("insecure-skip-tls-verify"); it != cluster.end() && it->is_boolean()) {
    config.insecure_skip_tls_verify = it->get<bool>();
  }
  if (absl::Status s = ReadPem(cluster, "certificate-authority", *cluster_file, &config.ca_pem);
      !s.ok()) {
    return s;
  }

  std::string user_name = StringAt(ctx, "user");
  if (user_name.empty()) return config;  // anonymous
  auto [user_entry, user_file] = FindNamed(files, "users", user_name);
  if (!user_entry) {
    return absl::InvalidArgumentError(StrCat("kubeconfig: context \"", context_name,
                                             "\" names user \"", user_name,
                                             "\", which is not defined"));
  }
  static const json kNoCredentials = json::object();
  const json* user_object = ObjectAt(*user_entry, "user");
  const json& user = user_object ? *user_object : kNoCredentials;
  for (const char* unsupported : {"exec", "auth-provider", "username"}) {
    if (user.contains(unsupported)) {
      return absl::UnimplementedError(StrCat(user_file->path, ": user \"", user_name,
                                             "\": ", unsupported,
                                             " credentials are not supported; use a client "
                                             "certificate or a token"));
    }
  }
  if (absl::Status s = ReadPem(user, "client-certificate", *user_file, &config.client_cert_pem);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadPem(user, "client-key", *user_file, &config.client_key_pem); !s.ok()) {
    return s;
  }
  config.bearer_token = StringAt(user, "token");
  if (std::string file = StringAt(user, "tokenFile"); !file.empty()) {
    fs::path p(file);
    if (p.is_relative()) p = fs::path(user_file->path).parent_path() / p;
    config.bearer_token_file = p.string();
  }
  return config;
}

absl::StatusOr<RestConfig> InClusterConfig(const std::map<std::string, std::string>& env,
                                           const std::string& root) {
  auto get = [&](const char* key) {
    auto it = env.find(key);
    return it == env.end() ? std::string() : it->second;
  };
  std::string host = get("KUBERNETES_SERVICE_HOST");
  std::string port = get("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::NotFoundError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset");
  }
  std::string dir = root + kServiceAccountDir;
  RestConfig config;
  config.source = "in-cluster service account";
  bool ipv6 = host.find(':') != std::string::npos;
  config.server = StrCat("https://", ipv6 ? "[" + host + "]" : host, ":", port);
  config.bearer_token_file = dir + "/token";
  if (!ReadFile(config.bearer_token_file).ok()) {
    return absl::NotFoundError(StrCat("in-cluster: cannot read ", config.bearer_token_file));
  }
  absl::StatusOr<std::string> ca = ReadFile(dir + "/ca.crt");
  if (!ca.ok()) return absl::NotFoundError(StrCat("in-cluster: cannot read ", dir, "/ca.crt"));
  config.ca_pem = std::move(*ca);
  if (absl::StatusOr<std::string> ns = ReadFile(dir + "/namespace"); ns.ok() && !ns->empty()) {
    config.namespace_ = std::string(absl::StripAsciiWhitespace(*ns));
  }
  return config;
}

absl::StatusOr<RestConfig> DefaultConfig(const std::string& explicit_path,
                                         const std::string& context) {
  if (!explicit_path.empty()) return LoadKubeconfig({explicit_path}, context);
  if (const char* list = std::getenv("KUBECONFIG"); list && *list) {
    std::vector<std::string> paths;
    std::stringstream in(list);
    for (std::string p; std::getline(in, p, ':');) paths.push_back(p);
    return LoadKubeconfig(paths, context);
  }
  std::map<std::string, std::string> env;
  for (const char* key : {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}) {
    if (const char* v = std::getenv(key)) env[key] = v;
  }
  if (!env.empty() && context.empty()) return InClusterConfig(env);
  const char* home = std::getenv("HOME");
  return LoadKubeconfig({StrCat(home ? home : "", "/.kube/config")}, context);
}

}  // namespace lockstep::kube
