#pragma once
// HttpServer: serves an ApiServer over plain HTTP/1.1 on a loopback address, with Boost.Beast.
// One thread per connection (a local cluster has a handful of clients); watch responses are
// streamed with chunked encoding until the watch ends or the client goes away. A request
// body over the API server's limit is answered 413 without being read whole.
// Thread-safety: the accessors may be called from any thread; the destructor ends every
// watch being streamed (WatchSource::Cancel) and closes every connection.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/local/apiserver/api_server.h"

namespace lockstep::local {

class HttpServer {
 public:
  // Listens on `address`:`port` (0 = any free port). `api` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(ApiServer* api,
                                                           const std::string& address = "127.0.0.1",
                                                           uint16_t port = 0,
                                                           size_t max_body_bytes = 3 << 20);
  ~HttpServer();

  uint16_t port() const;
  std::string url() const;  // "http://127.0.0.1:PORT"

  // For tests. Connection threads the server holds: those serving, and finished ones not yet
  // joined (each new connection joins the finished ones), so a server that forgot to join
  // would hold one per connection it ever had.
  size_t ConnectionThreads() const;
  // For tests: waits until no connection is being served; false if `timeout` passed first.
  bool WaitUntilIdle(absl::Duration timeout) const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Percent-decoding of a URL component ('+' is a space in a query).
std::string UrlDecode(std::string_view s, bool query);
// A request's method, path and decoded query from its target ("/api/v1/pods?watch=1"), as the
// HTTP server reads them.
ApiRequest ParseTarget(std::string method, std::string_view target);

}  // namespace lockstep::local
