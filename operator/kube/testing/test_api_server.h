#pragma once
// TestApiServer: a small Kubernetes-style API server on 127.0.0.1 for integration tests of
// the real HTTP transport. It serves one namespaced resource (pods) with list, watch (chunked
// stream), get, create, update (409 on a stale resourceVersion), merge patch and delete, keeps
// an event history for watches, and lets a test break things: drop every open watch
// connection, or compact the history so that old versions answer 410 Gone. With TLS options
// it serves HTTPS and can require a client certificate.
// Thread-safety: thread-safe; one thread per connection.

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::kube::testing {

struct TestApiServerOptions {
  std::string cert_pem;  // set both for HTTPS
  std::string key_pem;
  std::string client_ca_pem;   // set to require client certificates signed by this CA
  std::string required_token;  // set to require "Authorization: Bearer <token>"
};

class TestApiServer {
 public:
  explicit TestApiServer(TestApiServerOptions options = {});
  ~TestApiServer();

  std::string url() const;  // "http://127.0.0.1:PORT"

  // Changes made directly, as another client would; each gets a new resourceVersion and
  // reaches open watches.
  nlohmann::json Put(nlohmann::json pod);
  void Delete(const std::string& ns, const std::string& name);
  // Closes every open watch connection without a clean end of the body.
  void DropWatches();
  // Forgets the event history: watches from any earlier version now get 410 Gone.
  void Compact();
  // Number of watch requests served so far.
  int watches() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::kube::testing
