#include "operator/kube/testing/fake_transport.h"

namespace lockstep::kube {

void FakeBody::Push(std::string chunk) {
  std::lock_guard lock(mu_);
  chunks_.push_back(std::move(chunk));
  cv_.notify_all();
}

void FakeBody::End() {
  std::lock_guard lock(mu_);
  ended_ = true;
  cv_.notify_all();
}

void FakeBody::Fail(absl::Status why) {
  std::lock_guard lock(mu_);
  error_ = std::move(why);
  cv_.notify_all();
}

bool FakeBody::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

absl::StatusOr<std::string> FakeBody::Read() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !chunks_.empty() || ended_ || cancelled_ || !error_.ok(); });
  if (cancelled_) return absl::CancelledError("stream cancelled");
  if (!chunks_.empty()) {
    std::string chunk = std::move(chunks_.front());
    chunks_.pop_front();
    return chunk;
  }
  if (!error_.ok()) return error_;
  return std::string();
}

void FakeBody::Cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

namespace {

class BodyHandle final : public BodyStream {
 public:
  explicit BodyHandle(std::shared_ptr<FakeBody> body) : body_(std::move(body)) {}
  absl::StatusOr<std::string> Read() override { return body_->Read(); }
  void Cancel() override { body_->Cancel(); }

 private:
  std::shared_ptr<FakeBody> body_;
};

}  // namespace

void FakeTransport::QueueResponse(int status, std::string body,
                                  std::vector<std::pair<std::string, std::string>> headers) {
  std::lock_guard lock(mu_);
  responses_.push_back(HttpResponse{status, std::move(headers), std::move(body)});
}

void FakeTransport::QueueError(absl::Status error) {
  std::lock_guard lock(mu_);
  responses_.push_back(std::move(error));
}

std::shared_ptr<FakeBody> FakeTransport::QueueStream(int status) {
  auto body = std::make_shared<FakeBody>();
  std::lock_guard lock(mu_);
  streams_.push_back(std::make_pair(status, body));
  cv_.notify_all();
  return body;
}

void FakeTransport::QueueStreamError(absl::Status error) {
  std::lock_guard lock(mu_);
  streams_.push_back(std::move(error));
  cv_.notify_all();
}

void FakeTransport::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

std::vector<HttpRequest> FakeTransport::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

void FakeTransport::WaitForRequests(size_t n) const {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return requests_.size() >= n; });
}

void FakeTransport::SetHandler(
    std::function<std::optional<HttpResponse>(const HttpRequest&)> handler) {
  std::lock_guard lock(mu_);
  handler_ = std::move(handler);
}

absl::StatusOr<HttpResponse> FakeTransport::Send(const HttpRequest& request) {
  std::unique_lock lock(mu_);
  requests_.push_back(request);
  cv_.notify_all();
  if (handler_) {
    auto handler = handler_;
    lock.unlock();
    if (std::optional<HttpResponse> answer = handler(request)) return *std::move(answer);
    lock.lock();
  }
  if (responses_.empty()) {
    return absl::UnavailableError("fake transport: no response queued for " + request.target);
  }
  Scripted next = std::move(responses_.front());
  responses_.pop_front();
  if (auto* error = std::get_if<absl::Status>(&next)) return *error;
  return std::get<HttpResponse>(std::move(next));
}

absl::StatusOr<StreamedResponse> FakeTransport::Open(const HttpRequest& request) {
  std::unique_lock lock(mu_);
  requests_.push_back(request);
  cv_.notify_all();
  cv_.wait(lock, [&] { return !streams_.empty() || closed_; });
  if (streams_.empty()) return absl::CancelledError("fake transport closed");
  ScriptedStream next = std::move(streams_.front());
  streams_.pop_front();
  if (auto* error = std::get_if<absl::Status>(&next)) return *error;
  auto& [status, body] = std::get<0>(next);
  StreamedResponse response;
  response.status = status;
  response.body = std::make_unique<BodyHandle>(body);
  return response;
}

}  // namespace lockstep::kube
