#include "operator/local/apiserver/local_transport.h"

#include <atomic>

#include "operator/local/apiserver/http_server.h"

namespace lockstep::local {
namespace {

ApiRequest ToApi(const kube::HttpRequest& request) {
  ApiRequest r;
  r.method = request.method;
  size_t q = request.target.find('?');
  r.path = UrlDecode(request.target.substr(0, q), false);
  if (q != std::string::npos) {
    std::string_view rest = std::string_view(request.target).substr(q + 1);
    while (!rest.empty()) {
      size_t amp = rest.find('&');
      std::string_view part = rest.substr(0, amp);
      size_t eq = part.find('=');
      r.query[UrlDecode(part.substr(0, eq), true)] =
          eq == std::string_view::npos ? "" : UrlDecode(part.substr(eq + 1), true);
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
  }
  if (const std::string* ct = request.Header("Content-Type")) r.content_type = *ct;
  if (const std::string* accept = request.Header("Accept")) r.accept = *accept;
  if (const std::string* auth = request.Header("Authorization")) r.authorization = *auth;
  if (const std::string* agent = request.Header("User-Agent")) r.user_agent = *agent;
  r.body = request.body;
  return r;
}

class WatchBody final : public kube::BodyStream {
 public:
  explicit WatchBody(std::shared_ptr<WatchSource> source) : source_(std::move(source)) {}
  absl::StatusOr<std::string> Read() override {
    while (!cancelled_.load()) {
      std::optional<std::string> lines = source_->Next();
      if (!lines) break;
      if (!lines->empty()) return *lines;
    }
    if (cancelled_.load()) return absl::CancelledError("stream cancelled");
    return std::string();
  }
  // Wakes a Read blocked in the source's Next at once, rather than at its next return.
  void Cancel() override {
    cancelled_ = true;
    source_->Cancel();
  }

 private:
  std::shared_ptr<WatchSource> source_;
  std::atomic<bool> cancelled_{false};
};

class StringBody final : public kube::BodyStream {
 public:
  explicit StringBody(std::string body) : body_(std::move(body)) {}
  absl::StatusOr<std::string> Read() override { return std::exchange(body_, std::string()); }
  void Cancel() override {}

 private:
  std::string body_;
};

}  // namespace

std::unique_ptr<kube::BodyStream> NewWatchBody(std::shared_ptr<WatchSource> source) {
  return std::make_unique<WatchBody>(std::move(source));
}

absl::StatusOr<kube::HttpResponse> LocalTransport::Send(const kube::HttpRequest& request) {
  ApiResponse out = api_->Handle(ToApi(request));
  return kube::HttpResponse{out.status, {{"Content-Type", out.content_type}}, std::move(out.body)};
}

absl::StatusOr<kube::StreamedResponse> LocalTransport::Open(const kube::HttpRequest& request) {
  ApiResponse out = api_->Handle(ToApi(request));
  kube::StreamedResponse r;
  r.status = out.status;
  r.headers = {{"Content-Type", out.content_type}};
  if (out.watch) {
    r.body = NewWatchBody(out.watch);
  } else {
    r.body = std::make_unique<StringBody>(std::move(out.body));
  }
  return r;
}

}  // namespace lockstep::local
