#pragma once
// EndpointServer: plain-HTTP endpoints on Boost.Beast: the operator's /metrics, /healthz and
// /readyz, the trainer's /progress and /metrics. One request
// per connection, served one at a time on one thread; a client that sends nothing is dropped after
// 5 seconds, so a stuck scraper cannot starve the probes. Thread-safety: construct, read port(),
// destroy; the handler runs on the server's thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace lockstep::common {

struct EndpointResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called with the request's path (query removed); GET and HEAD only, others get 405.
using EndpointHandler = std::function<EndpointResponse(const std::string& path)>;

class EndpointServer {
 public:
  // `address` "host:port" (":8080" means every address); port 0 picks a free one.
  static absl::StatusOr<std::unique_ptr<EndpointServer>> Start(const std::string& address,
                                                               EndpointHandler handler);
  ~EndpointServer();
  uint16_t port() const;

 private:
  struct Impl;
  explicit EndpointServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::common
