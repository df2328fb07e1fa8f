#pragma once
// The production Transport, on cpprestsdk. This header does not include cpprestsdk; only
// cpprest_transport.cc does, and it turns every cpprestsdk exception into a Status.
//
// Timeouts: cpprestsdk bounds connecting (TCP and TLS) and every later silence of the server
// by one idle timer, which we set to `connect_timeout`; HttpRequest::timeout bounds the whole
// exchange (Send) or the wait for headers and for each chunk (Open). A timeout is
// kDeadlineExceeded; no connection, a reset or a TLS failure is kUnavailable.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/kube/transport.h"

namespace lockstep::kube {

struct HttpTransportOptions {
  std::string server;  // "https://host:6443" or "http://127.0.0.1:8080"
  std::string ca_pem;  // trusted CAs for the server; empty: the system's roots
  std::string client_cert_pem;
  std::string client_key_pem;
  bool insecure_skip_tls_verify = false;
  absl::Duration connect_timeout = absl::Seconds(30);
};

// Fails with kInvalidArgument for a bad URL or unreadable PEM data.
absl::StatusOr<std::unique_ptr<Transport>> NewHttpTransport(const HttpTransportOptions& options);

}  // namespace lockstep::kube
