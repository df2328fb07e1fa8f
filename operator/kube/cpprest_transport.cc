// The only file that includes cpprestsdk. Every call into it is wrapped so that no exception
// leaves this file.
#include <cpprest/http_client.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "operator/kube/cpprest_transport.h"

namespace lockstep::kube {
namespace {

namespace http = web::http;
using http::client::http_client;
using http::client::http_client_config;

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

absl::Status FromException(std::exception_ptr e, const std::string& doing) {
  try {
    std::rethrow_exception(e);
  } catch (const pplx::task_canceled&) {
    return absl::CancelledError(absl::StrCat(doing, ": cancelled"));
  } catch (const http::http_exception& ex) {
    if (ex.error_code() == std::errc::timed_out) {
      return absl::DeadlineExceededError(absl::StrCat(doing, ": timed out"));
    }
    if (ex.error_code() == std::errc::operation_canceled) {
      return absl::CancelledError(absl::StrCat(doing, ": cancelled"));
    }
    return absl::UnavailableError(absl::StrCat(doing, ": ", ex.what()));
  } catch (const std::exception& ex) {
    return absl::UnavailableError(absl::StrCat(doing, ": ", ex.what()));
  } catch (...) {
    return absl::UnknownError(absl::StrCat(doing, ": unknown error"));
  }
}

// One pending asynchronous result that a caller waits for with a deadline, and that a
// cancel can end early. The cpprestsdk continuation keeps it alive after the caller left.
template <typename T>
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool cancelled = false;
  std::optional<T> value;
  std::exception_ptr error;

  void Set(pplx::task<T> task) {
    std::optional<T> v;
    std::exception_ptr err;
    try {
      v = task.get();
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard lock(mu);
    value = std::move(v);
    error = err;
    done = true;
    cv.notify_all();
  }

  void Cancel() {
    std::lock_guard lock(mu);
    cancelled = true;
    cv.notify_all();
  }

  // OK with the value; kDeadlineExceeded, kCancelled or the task's error otherwise.
  absl::StatusOr<T> Wait(absl::Duration timeout, const std::string& doing) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, ToChrono(timeout), [&] { return done || cancelled; })) {
      return absl::DeadlineExceededError(
          absl::StrCat(doing, ": no answer within ", absl::FormatDuration(timeout)));
    }
    if (cancelled && !done) return absl::CancelledError(absl::StrCat(doing, ": cancelled"));
    if (error) return FromException(error, doing);
    return std::move(*value);
  }
};

std::vector<std::pair<std::string, std::string>> HeadersOf(const http::http_response& r) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : r.headers()) out.emplace_back(k, v);
  return out;
}

class CpprestBody final : public BodyStream {
 public:
  CpprestBody(http::http_response response, pplx::cancellation_token_source cts,
              absl::Duration idle)
      : response_(std::move(response)), cts_(std::move(cts)), idle_(idle) {}
  ~CpprestBody() override { Cancel(); }

  absl::StatusOr<std::string> Read() override {
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return absl::CancelledError("stream cancelled");
    }
    std::shared_ptr<Pending<size_t>> pending;
    auto buffer = std::make_shared<std::vector<uint8_t>>(kChunk);
    concurrency::streams::streambuf<uint8_t> sb;
    try {
      sb = response_.body().streambuf();
      pending = std::make_shared<Pending<size_t>>();
      sb.getn(buffer->data(), 1).then([pending, buffer](pplx::task<size_t> t) {
        pending->Set(std::move(t));
      });
    } catch (...) {
      return FromException(std::current_exception(), "reading the response");
    }
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return absl::CancelledError("stream cancelled");
      current_ = pending;
    }
    absl::StatusOr<size_t> first = pending->Wait(idle_, "reading the response");
    {
      std::lock_guard lock(mu_);
      current_.reset();
    }
    if (!first.ok()) {
      cts_.cancel();
      return first.status();
    }
    if (*first == 0) return std::string();
    size_t n = *first;
    try {
      size_t avail = sb.in_avail();
      if (avail > 0) n += sb.getn(buffer->data() + 1, std::min(avail, kChunk - 1)).get();
    } catch (...) {
      return FromException(std::current_exception(), "reading the response");
    }
    return std::string(buffer->begin(), buffer->begin() + static_cast<std::ptrdiff_t>(n));
  }

  void Cancel() override {
    std::shared_ptr<Pending<size_t>> pending;
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return;
      cancelled_ = true;
      pending = current_;
    }
    cts_.cancel();
    if (pending) pending->Cancel();
  }

 private:
  static constexpr size_t kChunk = 64 << 10;

  http::http_response response_;
  pplx::cancellation_token_source cts_;
  absl::Duration idle_;
  std::mutex mu_;
  bool cancelled_ = false;
  std::shared_ptr<Pending<size_t>> current_;
};

// The requests whose last continuation has not run yet. A request given up on (a timeout)
// is cancelled, and its continuation runs on cpprestsdk's thread pool a moment later; the
// transport waits for those (boundedly) before it goes, so nothing of theirs outlives it.
struct InFlight {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
  void Add() {
    std::lock_guard lock(mu);
    ++count;
  }
  void Done() {
    std::lock_guard lock(mu);
    if (--count == 0) cv.notify_all();
  }
  void Drain(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, limit, [&] { return count == 0; });
  }
};

class CpprestTransport final : public Transport {
 public:
  CpprestTransport(std::unique_ptr<http_client> client, std::unique_ptr<http_client> streams)
      : client_(std::move(client)), streams_(std::move(streams)) {}
  ~CpprestTransport() override { in_flight_->Drain(std::chrono::seconds(5)); }

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    std::string doing = absl::StrCat(request.method, " ", request.target);
    pplx::cancellation_token_source cts;
    auto pending = std::make_shared<Pending<HttpResponse>>();
    in_flight_->Add();
    try {
      client_->request(ToCpprest(request), cts.get_token())
          .then([](http::http_response r) {
            return r.extract_vector().then([r](std::vector<unsigned char> body) {
              HttpResponse out;
              out.status = r.status_code();
              out.headers = HeadersOf(r);
              out.body.assign(body.begin(), body.end());
              return out;
            });
          })
          .then([pending, in_flight = in_flight_](pplx::task<HttpResponse> t) {
            pending->Set(std::move(t));
            in_flight->Done();
          });
    } catch (...) {
      in_flight_->Done();
      return FromException(std::current_exception(), doing);
    }
    absl::StatusOr<HttpResponse> result = pending->Wait(request.timeout, doing);
    if (!result.ok()) cts.cancel();
    return result;
  }

  absl::StatusOr<StreamedResponse> Open(const HttpRequest& request) override {
    std::string doing = absl::StrCat(request.method, " ", request.target);
    pplx::cancellation_token_source cts;
    auto pending = std::make_shared<Pending<http::http_response>>();
    in_flight_->Add();
    try {
      streams_->request(ToCpprest(request), cts.get_token())
          .then([pending, in_flight = in_flight_](pplx::task<http::http_response> t) {
            pending->Set(std::move(t));
            in_flight->Done();
          });
    } catch (...) {
      in_flight_->Done();
      return FromException(std::current_exception(), doing);
    }
    absl::StatusOr<http::http_response> result = pending->Wait(request.timeout, doing);
    if (!result.ok()) {
      cts.cancel();
      return result.status();
    }
    StreamedResponse out;
    out.status = result->status_code();
    out.headers = HeadersOf(*result);
    out.body = std::make_unique<CpprestBody>(std::move(*result), cts, request.timeout);
    return out;
  }

 private:
  static http::http_request ToCpprest(const HttpRequest& request) {
    http::http_request r(request.method);
    r.set_request_uri(request.target);
    std::string content_type = "application/json";
    for (const auto& [name, value] : request.headers) {
      if (absl::EqualsIgnoreCase(name, "Content-Type")) {
        content_type = value;
      } else {
        r.headers().add(name, value);
      }
    }
    if (!request.body.empty()) r.set_body(request.body, content_type);
    return r;
  }

  std::unique_ptr<http_client> client_;
  std::unique_ptr<http_client> streams_;
  std::shared_ptr<InFlight> in_flight_ = std::make_shared<InFlight>();
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> NewHttpTransport(const HttpTransportOptions& options) {
  web::uri uri;
  try {
    uri = web::uri(options.server);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", options.server, "\": ", e.what()));
  }
  if ((uri.scheme() != "http" && uri.scheme() != "https") || uri.host().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server \"", options.server, "\": want http://host[:port] or https://host[:port]"));
  }
  bool tls = uri.scheme() == "https";
  if (!tls && (!options.ca_pem.empty() || !options.client_cert_pem.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server \"", options.server, "\": certificates given for a plain-HTTP server"));
  }
  if (options.client_cert_pem.empty() != options.client_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and a key its certificate");
  }
  // Load the PEM data once now, so bad data is a configuration error and not a failure of
  // every request later.
  auto configure = [options](boost::asio::ssl::context& ctx) {
    if (!options.ca_pem.empty()) {
      ctx.add_certificate_authority(boost::asio::buffer(options.ca_pem));
    }
    if (!options.client_cert_pem.empty()) {
      ctx.use_certificate_chain(boost::asio::buffer(options.client_cert_pem));
      ctx.use_private_key(boost::asio::buffer(options.client_key_pem),
                          boost::asio::ssl::context::pem);
    }
  };
  if (tls) {
    try {
      boost::asio::ssl::context probe(boost::asio::ssl::context::tls_client);
      configure(probe);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("TLS credentials: ", e.what()));
    }
  }
  auto make = [&](absl::Duration idle) -> std::unique_ptr<http_client> {
    http_client_config config;
    config.set_timeout(ToChrono(idle));
    config.set_validate_certificates(!options.insecure_skip_tls_verify);
    if (tls) {
      config.set_ssl_context_callback([configure](boost::asio::ssl::context& ctx) {
        try {
          configure(ctx);
        } catch (...) {
          // Checked when the transport was made; a failure here fails the handshake.
        }
      });
    }
    return std::make_unique<http_client>(uri, config);
  };
  try {
    // Watches stay silent for minutes; their idle limit is HttpRequest::timeout instead.
    return std::make_unique<CpprestTransport>(
        make(options.connect_timeout), make(std::max(options.connect_timeout, absl::Hours(1))));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", options.server, "\": ", e.what()));
  }
}

}  // namespace lockstep::kube
