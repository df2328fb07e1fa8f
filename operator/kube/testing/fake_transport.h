#pragma once
// FakeTransport: a scripted Transport for tests. Responses are queued in order; every request
// is recorded. Streamed responses hand the test a FakeBody to push chunks into, end or break,
// so a watch can be driven event by event. Open() with nothing queued blocks until the test
// queues a stream (or calls Close()), which lets a test wait for a reconnect deterministically.
// Thread-safety: thread-safe.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "operator/kube/transport.h"

namespace lockstep::kube {

class FakeBody {
 public:
  void Push(std::string chunk);
  void End();                   // the server closed the body cleanly
  void Fail(absl::Status why);  // the connection broke
  bool cancelled() const;

  absl::StatusOr<std::string> Read();
  void Cancel();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  bool ended_ = false;
  bool cancelled_ = false;
  absl::Status error_;
};

class FakeTransport final : public Transport {
 public:
  void QueueResponse(int status, std::string body,
                     std::vector<std::pair<std::string, std::string>> headers = {});
  void QueueError(absl::Status error);  // Send fails without a response
  std::shared_ptr<FakeBody> QueueStream(int status = 200);
  void QueueStreamError(absl::Status error);  // Open fails without a response
  // Answers Send() from a function (an in-memory API server) before the queue is consulted;
  // nullopt from it falls through to the queue.
  void SetHandler(std::function<std::optional<HttpResponse>(const HttpRequest&)> handler);
  // Makes every later Open() with nothing queued fail with kCancelled instead of blocking.
  void Close();

  std::vector<HttpRequest> requests() const;
  // Blocks until `n` requests (Send and Open) have been made.
  void WaitForRequests(size_t n) const;

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override;
  absl::StatusOr<StreamedResponse> Open(const HttpRequest& request) override;

 private:
  using Scripted = std::variant<HttpResponse, absl::Status>;
  using ScriptedStream = std::variant<std::pair<int, std::shared_ptr<FakeBody>>, absl::Status>;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<Scripted> responses_;
  std::deque<ScriptedStream> streams_;
  std::vector<HttpRequest> requests_;
  bool closed_ = false;
  std::function<std::optional<HttpResponse>(const HttpRequest&)> handler_;
};

}  // namespace lockstep::kube
