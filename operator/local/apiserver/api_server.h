#pragma once
// ApiServer: the Kubernetes REST protocol over the ObjectStore, independent of HTTP (the
// HTTP server in http_server.h feeds it requests). What it serves is listed in
// docs/tasks/run-without-a-cluster.md: discovery, built-in kinds, CRDs and their custom resources
// with schema defaulting, pruning and validation, status and scale subresources,
// resourceVersion/409 semantics, watches with bookmarks and 410, label and field selectors,
// paginated lists, the three patch formats, finalizers, graceful pod deletion and
// ownerReference cascades.
// Errors are answered as Kubernetes answers them: a metav1.Status body with code, reason,
// message and, for invalid objects, field causes. Handle() never throws.
// Thread-safety: thread-safe.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/local/apiserver/object_store.h"
#include "operator/local/apiserver/resource_registry.h"

namespace lockstep::local {

struct ApiRequest {
  std::string method;                        // GET, POST, PUT, PATCH, DELETE
  std::string path;                          // without the query
  std::map<std::string, std::string> query;  // decoded
  std::string content_type;
  std::string accept;  // "...;as=Table;..." asks for server-side printing
  std::string body;
  std::string authorization;  // the Authorization header; "" from in-process clients
  std::string user_agent;
};

// The body of a watch response, produced line by line as events happen.
class WatchSource {
 public:
  virtual ~WatchSource() = default;
  // The next lines to send (one JSON event per line); "" when there is nothing to send yet
  // (it returns at least once a second, so the server can notice a client that left);
  // nullopt when the watch is over.
  virtual std::optional<std::string> Next() = 0;
  // Ends the watch from another thread: a Next blocked now returns at once, and every Next
  // after returns nullopt (events already queued may come first). Lets a client that stops
  // leave without waiting for Next's once-a-second return. Does nothing for a source whose
  // Next never blocks.
  virtual void Cancel() {}
};

struct ApiResponse {
  int status = 200;
  std::string body;                    // JSON
  std::shared_ptr<WatchSource> watch;  // set for a watch: stream it instead of `body`
  std::string content_type = "application/json";
};

struct ApiServerOptions {
  std::string state_dir;   // "" keeps everything in memory
  size_t history = 10000;  // watch events kept for resuming
  absl::Duration bookmark_interval = absl::Seconds(60);
  absl::Duration default_watch_timeout = absl::Minutes(30);
  size_t max_body_bytes = 3 << 20;  // as the Kubernetes API server's limit
  // Where to append one audit.k8s.io/v1 Event (level Metadata) per API request, as JSON
  // lines; "" records nothing.
  std::string audit_log;
  // What GET /metrics answers (Prometheus text), as a Kubernetes API server serves its own:
  // `lockstep local serve` puts the in-process controller's metrics there. Null: 404.
  std::function<std::string()> metrics;
};

class ApiServer {
 public:
  static absl::StatusOr<std::unique_ptr<ApiServer>> Create(ApiServerOptions options);

  // Authenticates, authorizes and serves one request. Callers without an Authorization
  // header are the local administrator (system:admin, allowed everything); a bearer token
  // from IssueServiceAccountToken makes the caller that service account, whose requests RBAC
  // (Roles, ClusterRoles and their bindings stored here) must allow; any other token is 401.
  ApiResponse Handle(const ApiRequest& request);

  // A bearer token for service account `ns`/`name`, valid while that ServiceAccount exists
  // and this server runs (what the runner hands a pod). NotFound if there is no such account.
  absl::StatusOr<std::string> IssueServiceAccountToken(const std::string& ns,
                                                       const std::string& name);

  ObjectStore& store() { return *store_; }
  const ResourceRegistry& registry() const { return registry_; }

 private:
  class Impl;
  friend class Impl;
  ApiServer() = default;

  ApiServerOptions options_;
  std::unique_ptr<ObjectStore> store_;
  ResourceRegistry registry_;
  std::shared_ptr<Impl> impl_;
  struct Auth;
  std::shared_ptr<Auth> auth_;
};

}  // namespace lockstep::local
