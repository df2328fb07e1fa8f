#include "operator/kube/rest_client.h"

#include <cctype>
#include <utility>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/kube/api_error.h"

namespace lockstep::kube {

namespace resources {
const Resource kPods{"", "v1", "pods", "Pod", true};
const Resource kServices{"", "v1", "services", "Service", true};
const Resource kEvents{"", "v1", "events", "Event", true};
const Resource kSecrets{"", "v1", "secrets", "Secret", true};
const Resource kNamespaces{"", "v1", "namespaces", "Namespace", false};
const Resource kLeases{"coordination.k8s.io", "v1", "leases", "Lease", true};
const Resource kTrainingJobs{"lockstep.io", "v1alpha1", "trainingjobs", "TrainingJob", true};
const Resource kTfJobs{"kubeflow.org", "v1", "tfjobs", "TFJob", true};
}  // namespace resources

namespace {

constexpr size_t kMaxWatchLine = 64 << 20;  // one event; larger is a broken stream

class Query {
 public:
  void Add(std::string_view key, std::string_view value) {
    if (value.empty()) return;
    text_ += text_.empty() ? '?' : '&';
    text_ += StrCat(key, "=", UrlEncode(value));
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

std::string_view PatchContentType(PatchType t) {
  switch (t) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
  }
  return "application/merge-patch+json";
}

std::string NameOf(const nlohmann::json& object) {
  const nlohmann::json* meta = api::ObjectAt(object, "metadata");
  return meta ? api::StringAt(*meta, "name") : "";
}

}  // namespace

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string_view WatchEventTypeName(WatchEvent::Type t) {
  switch (t) {
    case WatchEvent::Type::kAdded:
      return "ADDED";
    case WatchEvent::Type::kModified:
      return "MODIFIED";
    case WatchEvent::Type::kDeleted:
      return "DELETED";
    case WatchEvent::Type::kBookmark:
      return "BOOKMARK";
    case WatchEvent::Type::kError:
      return "ERROR";
  }
  return "?";
}

WatchStream::WatchStream(std::unique_ptr<BodyStream> body, std::string what)
    : body_(std::move(body)), what_(std::move(what)) {}

absl::StatusOr<std::optional<WatchEvent>> WatchStream::Next() {
  while (true) {
    size_t newline = buffer_.find('\n', scanned_);
    if (newline == std::string::npos && ended_ && !buffer_.empty()) newline = buffer_.size();
    if (newline != std::string::npos) {
      std::string_view line(buffer_.data(), newline);
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      buffer_.erase(0, std::min(buffer_.size(), newline + 1));
      scanned_ = 0;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      if (j.is_discarded() || !j.is_object()) {
        return absl::DataLossError(StrCat(what_, ": watch sent a line that is not JSON"));
      }
      auto type = j.find("type");
      auto object = j.find("object");
      if (type == j.end() || !type->is_string() || object == j.end() || !object->is_object()) {
        return absl::DataLossError(
            StrCat(what_, ": watch event without a type and an object: ", DumpJson(j)));
      }
      WatchEvent event;
      const std::string& t = type->get_ref<const std::string&>();
      if (t == "ADDED") {
        event.type = WatchEvent::Type::kAdded;
      } else if (t == "MODIFIED") {
        event.type = WatchEvent::Type::kModified;
      } else if (t == "DELETED") {
        event.type = WatchEvent::Type::kDeleted;
      } else if (t == "BOOKMARK") {
        event.type = WatchEvent::Type::kBookmark;
      } else if (t == "ERROR") {
        event.type = WatchEvent::Type::kError;
      } else {
        return absl::DataLossError(StrCat(what_, ": unknown watch event type \"", t, "\""));
      }
      event.object = std::move(*object);
      return event;
    }
    if (ended_) return std::nullopt;
    scanned_ = buffer_.size();
    if (buffer_.size() > kMaxWatchLine) {
      return absl::DataLossError(StrCat(what_, ": watch event larger than 64 MiB"));
    }
    absl::StatusOr<std::string> chunk = body_->Read();
    if (!chunk.ok()) return chunk.status();
    if (chunk->empty()) {
      ended_ = true;
    } else {
      buffer_ += *chunk;
    }
  }
}

RestClient::RestClient(std::shared_ptr<Transport> transport, RestClientOptions options)
    : transport_(std::move(transport)), options_(std::move(options)) {}

std::string RestClient::Path(const Resource& r, std::string_view ns, std::string_view name,
                             std::string_view subresource) {
  std::string path =
      r.group.empty() ? StrCat("/api/", r.version) : StrCat("/apis/", r.group, "/", r.version);
  if (r.namespaced && !ns.empty()) path += StrCat("/namespaces/", UrlEncode(ns));
  path += StrCat("/", r.plural);
  if (!name.empty()) path += StrCat("/", UrlEncode(name));
  if (!subresource.empty()) path += StrCat("/", subresource);
  return path;
}

void RestClient::Prepare(HttpRequest& request) {
  request.SetHeader("Accept", "application/json");
  request.SetHeader("User-Agent", options_.user_agent);
  if (options_.throttle) (void)options_.throttle->Wait(options_.stop);
}

absl::StatusOr<nlohmann::json> RestClient::Call(HttpRequest request) {
  request.timeout = options_.timeout;
  Prepare(request);
  std::string what = StrCat(request.method, " ", request.target);
  absl::StatusOr<HttpResponse> response = transport_->Send(request);
  if (!response.ok()) {
    return absl::Status(response.status().code(), StrCat(what, ": ", response.status().message()));
  }
  if (response->status < 200 || response->status >= 300) {
    return ErrorFromResponse(response->status, response->body, response->Header("Retry-After"),
                             what);
  }
  nlohmann::json j = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(StrCat(what, ": the server answered ", response->status,
                                      " with a body that is not a "
                                      "JSON object"));
  }
  return j;
}

absl::StatusOr<nlohmann::json> RestClient::Get(const Resource& r, std::string_view ns,
                                               std::string_view name,
                                               std::string_view subresource) {
  return Call({.method = "GET", .target = Path(r, ns, name, subresource)});
}

absl::StatusOr<nlohmann::json> RestClient::List(const Resource& r, std::string_view ns,
                                                const ListOptions& options) {
  Query q;
  q.Add("labelSelector", options.label_selector);
  q.Add("fieldSelector", options.field_selector);
  if (options.limit > 0) q.Add("limit", std::to_string(options.limit));
  q.Add("continue", options.continue_token);
  q.Add("resourceVersion", options.resource_version);
  return Call({.method = "GET", .target = Path(r, ns) + q.str()});
}

absl::StatusOr<nlohmann::json> RestClient::ListAll(const Resource& r, std::string_view ns,
                                                   ListOptions options) {
  absl::StatusOr<nlohmann::json> all = List(r, ns, options);
  if (!all.ok()) return all;
  for (int page = 1;; ++page) {
    nlohmann::json& meta = (*all)["metadata"];
    if (!meta.is_object()) meta = nlohmann::json::object();
    auto cont = meta.find("continue");
    if (cont == meta.end() || !cont->is_string() || cont->get_ref<std::string&>().empty()) break;
    options.continue_token = cont->get<std::string>();
    options.resource_version.clear();  // the token pins the snapshot
    meta.erase("continue");
    absl::StatusOr<nlohmann::json> next = List(r, ns, options);
    if (!next.ok()) return next.status();
    nlohmann::json& items = (*all)["items"];
    if (!items.is_array()) items = nlohmann::json::array();
    if (auto it = next->find("items"); it != next->end() && it->is_array()) {
      for (nlohmann::json& item : *it) items.push_back(std::move(item));
    }
    if (auto it = next->find("metadata"); it != next->end() && it->is_object()) {
      meta = std::move(*it);
    }
  }
  return all;
}

absl::StatusOr<nlohmann::json> RestClient::Create(const Resource& r, std::string_view ns,
                                                  const nlohmann::json& object) {
  HttpRequest request{.method = "POST", .target = Path(r, ns), .body = DumpJson(object)};
  request.SetHeader("Content-Type", "application/json");
  return Call(std::move(request));
}

absl::StatusOr<nlohmann::json> RestClient::CreateSubresource(const Resource& r, std::string_view ns,
                                                             std::string_view name,
                                                             std::string_view subresource,
                                                             const nlohmann::json& object) {
  HttpRequest request{
      .method = "POST", .target = Path(r, ns, name, subresource), .body = DumpJson(object)};
  request.SetHeader("Content-Type", "application/json");
  return Call(std::move(request));
}

absl::StatusOr<nlohmann::json> RestClient::Update(const Resource& r, std::string_view ns,
                                                  const nlohmann::json& object) {
  std::string name = NameOf(object);
  if (name.empty()) return absl::InvalidArgumentError("update: the object has no metadata.name");
  HttpRequest request{.method = "PUT", .target = Path(r, ns, name), .body = DumpJson(object)};
  request.SetHeader("Content-Type", "application/json");
  return Call(std::move(request));
}

absl::StatusOr<nlohmann::json> RestClient::UpdateStatus(const Resource& r, std::string_view ns,
                                                        const nlohmann::json& object) {
  std::string name = NameOf(object);
  if (name.empty()) {
    return absl::InvalidArgumentError("update status: the object has no metadata.name");
  }
  HttpRequest request{
      .method = "PUT", .target = Path(r, ns, name, "status"), .body = DumpJson(object)};
  request.SetHeader("Content-Type", "application/json");
  return Call(std::move(request));
}

absl::StatusOr<nlohmann::json> RestClient::Patch(const Resource& r, std::string_view ns,
                                                 std::string_view name, PatchType type,
                                                 const nlohmann::json& patch,
                                                 std::string_view subresource) {
  HttpRequest request{
      .method = "PATCH", .target = Path(r, ns, name, subresource), .body = DumpJson(patch)};
  request.SetHeader("Content-Type", std::string(PatchContentType(type)));
  return Call(std::move(request));
}

absl::StatusOr<nlohmann::json> RestClient::Delete(const Resource& r, std::string_view ns,
                                                  std::string_view name,
                                                  const DeleteOptions& options) {
  nlohmann::json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (options.precondition_uid) body["preconditions"]["uid"] = *options.precondition_uid;
  if (options.precondition_resource_version) {
    body["preconditions"]["resourceVersion"] = *options.precondition_resource_version;
  }
  if (options.propagation_policy) body["propagationPolicy"] = *options.propagation_policy;
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  HttpRequest request{.method = "DELETE", .target = Path(r, ns, name), .body = DumpJson(body)};
  request.SetHeader("Content-Type", "application/json");
  return Call(std::move(request));
}

absl::StatusOr<std::unique_ptr<WatchStream>> RestClient::Watch(const Resource& r,
                                                               std::string_view ns,
                                                               const WatchOptions& options) {
  Query q;
  q.Add("watch", "true");
  q.Add("labelSelector", options.label_selector);
  q.Add("fieldSelector", options.field_selector);
  q.Add("resourceVersion", options.resource_version);
  if (options.allow_bookmarks) q.Add("allowWatchBookmarks", "true");
  if (options.timeout_seconds) q.Add("timeoutSeconds", std::to_string(*options.timeout_seconds));
  HttpRequest request{.method = "GET", .target = Path(r, ns) + q.str()};
  Prepare(request);
  request.timeout = options.timeout_seconds
                        ? absl::Seconds(*options.timeout_seconds) + absl::Seconds(30)
                        : options_.watch_idle_timeout;
  std::string what = StrCat("WATCH ", request.target);
  absl::StatusOr<StreamedResponse> response = transport_->Open(request);
  if (!response.ok()) {
    return absl::Status(response.status().code(), StrCat(what, ": ", response.status().message()));
  }
  if (response->status < 200 || response->status >= 300) {
    absl::StatusOr<std::string> body = ReadAll(*response->body);
    return ErrorFromResponse(response->status, body.ok() ? *body : "",
                             response->Header("Retry-After"), what);
  }
  return std::make_unique<WatchStream>(std::move(response->body), std::move(what));
}

}  // namespace lockstep::kube
