#pragma once
// Transport: how the REST client talks HTTP to an API server. The interface is ours so the
// HTTP library (cpprestsdk, in cpprest_transport.cc) can be replaced, and so tests can script
// responses with FakeTransport.
//
// Error policy: a transport returns a Status only when no HTTP response arrived (connection
// refused or reset, TLS failure, timeout, cancel): kUnavailable, kDeadlineExceeded or
// kCancelled. Any HTTP status, 4xx and 5xx included, is a response; mapping it to an error is
// the REST client's job. Transports never throw.
// Thread-safety: Send and Open may be called from many threads at once.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep::kube {

struct HttpRequest {
  std::string method = "GET";
  std::string target;  // path and query: "/api/v1/namespaces/default/pods?limit=500"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Send: the whole exchange. Open: until the headers arrive, then the longest silence
  // between two chunks of the body.
  absl::Duration timeout = absl::Seconds(60);

  void SetHeader(std::string name, std::string value);
  const std::string* Header(std::string_view name) const;  // case-insensitive
};

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  const std::string* Header(std::string_view name) const;  // case-insensitive
};

// The body of a streamed response, read chunk by chunk as the server sends it.
class BodyStream {
 public:
  virtual ~BodyStream() = default;
  // The next bytes of the body; an empty string at the end of the body. Blocks.
  virtual absl::StatusOr<std::string> Read() = 0;
  // Ends the stream from another thread: a blocked or later Read returns kCancelled.
  virtual void Cancel() = 0;
};

struct StreamedResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::unique_ptr<BodyStream> body;

  const std::string* Header(std::string_view name) const;  // case-insensitive
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual absl::StatusOr<HttpResponse> Send(const HttpRequest& request) = 0;
  virtual absl::StatusOr<StreamedResponse> Open(const HttpRequest& request) = 0;
};

// Reads a whole stream into a string (used for error bodies of streamed requests).
absl::StatusOr<std::string> ReadAll(BodyStream& body, size_t limit = 1 << 20);

}  // namespace lockstep::kube
