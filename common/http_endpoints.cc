#include "common/http_endpoints.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <thread>

#include "common/log.h"
#include "common/str_util.h"

namespace lockstep::common {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

struct EndpointServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  EndpointHandler handler;
  std::atomic<bool> stopping{false};
  std::thread thread;
  uint16_t port = 0;

  void Serve() {
    while (!stopping.load()) {
      tcp::socket socket(io);
      boost::system::error_code ec;
      acceptor.accept(socket, ec);
      if (ec || stopping.load()) continue;
      timeval tv{.tv_sec = 5, .tv_usec = 0};
      setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      boost::beast::flat_buffer buffer;
      http::request<http::string_body> req;
      http::request_parser<http::string_body> parser;
      parser.body_limit(64 * 1024);
      http::read(socket, buffer, parser, ec);
      if (ec) continue;
      req = parser.release();
      http::response<http::string_body> res;
      res.version(req.version());
      res.keep_alive(false);
      if (req.method() != http::verb::get && req.method() != http::verb::head) {
        res.result(http::status::method_not_allowed);
        res.set(http::field::allow, "GET, HEAD");
        res.body() = "method not allowed\n";
      } else {
        std::string target(req.target());
        EndpointResponse r;
        try {
          r = handler(target.substr(0, target.find('?')));
        } catch (const std::exception& e) {
          r = {500, "text/plain; charset=utf-8", StrCat("internal error: ", e.what(), "\n")};
        }
        res.result(static_cast<unsigned>(r.status));
        res.set(http::field::content_type, r.content_type);
        if (req.method() == http::verb::get) res.body() = std::move(r.body);
      }
      res.prepare_payload();
      http::write(socket, res, ec);
      socket.shutdown(tcp::socket::shutdown_both, ec);
    }
  }
};

EndpointServer::EndpointServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<EndpointServer>> EndpointServer::Start(const std::string& address,
                                                                      EndpointHandler handler) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("address \"", address, "\" is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(StrCat("address \"", address, "\" has no valid port"));
  }
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  boost::system::error_code ec;
  asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("address \"", address, "\": ", ec.message()));
  tcp::endpoint endpoint(ip, static_cast<uint16_t>(port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(16, ec);
  if (ec) return absl::UnavailableError(StrCat("cannot listen on ", address, ": ", ec.message()));
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Serve(); });
  return std::unique_ptr<EndpointServer>(new EndpointServer(std::move(impl)));
}

EndpointServer::~EndpointServer() {
  impl_->stopping = true;
  boost::system::error_code ec;
  {
    tcp::socket poke(impl_->io);
    asio::ip::address a = impl_->acceptor.local_endpoint(ec).address();
    if (a.is_unspecified()) a = asio::ip::make_address("127.0.0.1");
    poke.connect(tcp::endpoint(a, impl_->port), ec);
  }
  impl_->thread.join();
  impl_->acceptor.close(ec);
}

uint16_t EndpointServer::port() const { return impl_->port; }

}  // namespace lockstep::common
