#pragma once
// RestClient: typed verbs over the Kubernetes REST protocol for core and custom resources.
// Objects travel as nlohmann::json; decoding into typed structs is the caller's business.
// Every HTTP error becomes a Status built by api_error.h (IsNotFound, IsConflict, IsGone...);
// a malformed response body is kDataLoss. Nothing here throws.
// Thread-safety: thread-safe; one client is shared by the whole operator.

#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "operator/kube/rate_limiter.h"
#include "operator/kube/transport.h"

namespace lockstep::kube {

// A collection of objects on the API server.
struct Resource {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
  std::string kind;
  bool namespaced = true;

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
};

namespace resources {
extern const Resource kPods;
extern const Resource kServices;
extern const Resource kEvents;
extern const Resource kSecrets;
extern const Resource kNamespaces;
extern const Resource kLeases;
extern const Resource kTrainingJobs;
extern const Resource kTfJobs;  // Kubeflow's kubeflow.org/v1 TFJob, when served
}  // namespace resources

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;  // page size; 0 = no paging
  std::string continue_token;
  std::string resource_version;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  bool allow_bookmarks = true;
  std::optional<int64_t> timeout_seconds;  // the server ends the watch after this long
};

enum class PatchType { kMerge, kJson, kStrategicMerge };

struct DeleteOptions {
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
  std::optional<std::string> propagation_policy;  // "Foreground", "Background" or "Orphan"
  std::optional<int64_t> grace_period_seconds;
};

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kAdded;
  nlohmann::json object;
};
std::string_view WatchEventTypeName(WatchEvent::Type t);

// Events of one watch response, one JSON object per line of the streamed body.
class WatchStream {
 public:
  WatchStream(std::unique_ptr<BodyStream> body, std::string what);
  ~WatchStream() { body_->Cancel(); }  // dropping a stream closes its connection
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;
  // The next event; nullopt when the server ended the stream cleanly; kDataLoss for a line
  // that is not a watch event; the transport's error when the connection broke.
  absl::StatusOr<std::optional<WatchEvent>> Next();
  // Ends the stream from another thread; a blocked Next() returns kCancelled.
  void Cancel() { body_->Cancel(); }

 private:
  std::unique_ptr<BodyStream> body_;
  std::string what_;
  std::string buffer_;
  size_t scanned_ = 0;  // bytes of buffer_ known to hold no newline
  bool ended_ = false;
};

struct RestClientOptions {
  std::string user_agent = "lockstep";
  absl::Duration timeout = absl::Seconds(60);
  // Idle limit for a watch without timeoutSeconds; otherwise timeoutSeconds plus a margin.
  absl::Duration watch_idle_timeout = absl::Minutes(10);
  std::shared_ptr<TokenBucket> throttle;  // null: no client-side throttling
  // Once requested, requests no longer wait for the throttle: a stopping process finishes its
  // last calls (and releases its Lease) at once.
  std::stop_token stop;
};

class RestClient {
 public:
  RestClient(std::shared_ptr<Transport> transport, RestClientOptions options = {});

  absl::StatusOr<nlohmann::json> Get(const Resource& r, std::string_view ns, std::string_view name,
                                     std::string_view subresource = "");
  // One page of a list (metadata.continue is set when more remain).
  absl::StatusOr<nlohmann::json> List(const Resource& r, std::string_view ns,
                                      const ListOptions& options = {});
  // Every page, joined into one list whose resourceVersion is the snapshot's. A continue
  // token that expired mid-way returns the Gone error; the caller lists again.
  absl::StatusOr<nlohmann::json> ListAll(const Resource& r, std::string_view ns,
                                         ListOptions options = {});
  absl::StatusOr<nlohmann::json> Create(const Resource& r, std::string_view ns,
                                        const nlohmann::json& object);
  // POST to an object's subresource (pods/<name>/binding).
  absl::StatusOr<nlohmann::json> CreateSubresource(const Resource& r, std::string_view ns,
                                                   std::string_view name,
                                                   std::string_view subresource,
                                                   const nlohmann::json& object);
  // PUT of the whole object (name and resourceVersion from its metadata): 409 on a stale
  // resourceVersion. UpdateStatus writes the status subresource only.
  absl::StatusOr<nlohmann::json> Update(const Resource& r, std::string_view ns,
                                        const nlohmann::json& object);
  absl::StatusOr<nlohmann::json> UpdateStatus(const Resource& r, std::string_view ns,
                                              const nlohmann::json& object);
  absl::StatusOr<nlohmann::json> Patch(const Resource& r, std::string_view ns,
                                       std::string_view name, PatchType type,
                                       const nlohmann::json& patch,
                                       std::string_view subresource = "");
  // The deleted object (or the object marked for deletion, or a Status), as the server says.
  absl::StatusOr<nlohmann::json> Delete(const Resource& r, std::string_view ns,
                                        std::string_view name, const DeleteOptions& options = {});
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, std::string_view ns,
                                                     const WatchOptions& options = {});

  // A client on the same transport with the same options but `throttle` (null: none): a
  // budget of its own for one kind of request, as the event recorder's.
  RestClient WithThrottle(std::shared_ptr<TokenBucket> throttle) const {
    RestClientOptions o = options_;
    o.throttle = std::move(throttle);
    return RestClient(transport_, std::move(o));
  }

  // "/apis/lockstep.io/v1alpha1/namespaces/ns/trainingjobs[/name[/sub]]"
  static std::string Path(const Resource& r, std::string_view ns, std::string_view name = "",
                          std::string_view subresource = "");

 private:
  absl::StatusOr<nlohmann::json> Call(HttpRequest request);
  void Prepare(HttpRequest& request);

  std::shared_ptr<Transport> transport_;
  RestClientOptions options_;
};

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string UrlEncode(std::string_view s);
// JSON text that never throws (invalid UTF-8 from a server is replaced, not fatal).
std::string DumpJson(const nlohmann::json& j);

}  // namespace lockstep::kube
