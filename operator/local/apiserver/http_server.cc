#include "operator/local/apiserver/http_server.h"

#include <poll.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/str_util.h"

namespace lockstep::local {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

std::string UrlDecode(std::string_view s, bool query) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '+' && query) {
      out += ' ';
    } else if (c == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

ApiRequest ParseTarget(std::string method, std::string_view target) {
  ApiRequest r;
  r.method = std::move(method);
  size_t q = target.find('?');
  r.path = UrlDecode(target.substr(0, q), false);
  if (q != std::string_view::npos) {
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
      size_t amp = rest.find('&');
      std::string_view part = rest.substr(0, amp);
      size_t eq = part.find('=');
      std::string key = UrlDecode(part.substr(0, eq), true);
      std::string value = eq == std::string_view::npos ? "" : UrlDecode(part.substr(eq + 1), true);
      if (!key.empty()) r.query[key] = value;
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
  }
  return r;
}

namespace {

ApiRequest ToApiRequest(const http::request<http::string_body>& req) {
  ApiRequest r = ParseTarget(std::string(req.method_string()),
                             std::string_view(req.target().data(), req.target().size()));
  r.content_type = std::string(req[http::field::content_type]);
  r.accept = std::string(req[http::field::accept]);
  r.authorization = std::string(req[http::field::authorization]);
  r.user_agent = std::string(req[http::field::user_agent]);
  r.body = req.body();
  return r;
}

// After refusing a request early, reads and drops what the client still sends (for at most
// 2 s and 64 MiB), so it can read the answer instead of losing it to a connection reset.
void Drain(tcp::socket& socket) {
  boost::system::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  size_t total = 0;
  char buf[64 << 10];
  while (total < (64u << 20)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{socket.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::recv(socket.native_handle(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
}

// True when the peer closed its side (or the socket failed).
bool PeerGone(tcp::socket& socket) {
  pollfd p{socket.native_handle(), POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char c;
  return ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

struct HttpServer::Impl {
  ApiServer* api;
  size_t max_body;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::thread accept_thread;
  std::mutex mu;
  std::condition_variable idle_cv;  // notified when a connection thread finishes serving
  bool stopping = false;
  size_t serving = 0;              // connection threads still in Serve
  std::set<WatchSource*> watches;  // being streamed; the destructor cancels them
  // One per open connection; finished ones are joined and dropped as new ones arrive.
  struct Connection {
    std::shared_ptr<tcp::socket> socket;
    std::shared_ptr<std::atomic<bool>> done;
    std::thread thread;
  };
  std::list<Connection> connections;

  void Accept() {
    while (true) {
      auto socket = std::make_shared<tcp::socket>(io);
      boost::system::error_code ec;
      acceptor.accept(*socket, ec);
      std::lock_guard lock(mu);
      if (stopping) return;
      if (ec) continue;
      // Watch events are small writes; without this, Nagle's algorithm holds them back.
      socket->set_option(tcp::no_delay(true), ec);
      for (auto it = connections.begin(); it != connections.end();) {
        if (!it->done->load()) {
          ++it;
          continue;
        }
        it->thread.join();
        it = connections.erase(it);
      }
      auto done = std::make_shared<std::atomic<bool>>(false);
      ++serving;
      connections.push_back({socket, done, std::thread([this, socket, done] {
                               Serve(*socket);
                               {
                                 std::lock_guard finished(mu);
                                 done->store(true);
                                 --serving;
                               }
                               idle_cv.notify_all();
                             })});
    }
  }

  bool Write(tcp::socket& socket, http::response<http::string_body>& res) {
    res.prepare_payload();
    boost::system::error_code ec;
    http::write(socket, res, ec);
    return !ec;
  }

  void Serve(tcp::socket& socket) {
    boost::beast::flat_buffer buffer;
    while (true) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(max_body + 1);
      parser.header_limit(64 << 10);
      boost::system::error_code ec;
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::body_limit) {
        http::response<http::string_body> res{http::status::payload_too_large, 11};
        res.set(http::field::content_type, "application/json");
        res.set(http::field::connection, "close");
        res.body() =
            nlohmann::json{
                {"kind", "Status"},
                {"apiVersion", "v1"},
                {"status", "Failure"},
                {"reason", "RequestEntityTooLarge"},
                {"code", 413},
                {"message", StrCat("the request body is larger than ", max_body, " bytes")}}
                .dump();
        Write(socket, res);
        Drain(socket);
        break;
      }
      if (ec) break;  // closed, or not HTTP: nothing sensible to answer
      http::request<http::string_body> req = parser.release();
      ApiResponse out = api->Handle(ToApiRequest(req));
      if (out.watch) {
        {
          std::lock_guard lock(mu);
          if (stopping) break;
          watches.insert(out.watch.get());
        }
        StreamWatch(socket, req, out);
        std::lock_guard lock(mu);
        watches.erase(out.watch.get());
        break;
      }
      http::response<http::string_body> res{static_cast<http::status>(out.status), req.version()};
      res.set(http::field::content_type, out.content_type);
      res.keep_alive(req.keep_alive());
      res.body() = std::move(out.body);
      if (!Write(socket, res) || !req.keep_alive()) break;
    }
    boost::system::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
  }

  void StreamWatch(tcp::socket& socket, const http::request<http::string_body>& req,
                   ApiResponse& out) {
    http::response<http::empty_body> res{static_cast<http::status>(out.status), req.version()};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::transfer_encoding, "chunked");
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    boost::system::error_code ec;
    http::write_header(socket, sr, ec);
    if (ec) return;
    while (true) {
      {
        std::lock_guard lock(mu);
        if (stopping) return;
      }
      std::optional<std::string> lines = out.watch->Next();
      if (!lines) break;
      if (lines->empty()) {
        if (PeerGone(socket)) return;
        continue;
      }
      asio::write(socket, http::make_chunk(asio::buffer(*lines)), ec);
      if (ec) return;
    }
    asio::write(socket, http::make_chunk_last(), ec);
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(ApiServer* api,
                                                              const std::string& address,
                                                              uint16_t port, size_t max_body) {
  auto impl = std::make_unique<Impl>();
  impl->api = api;
  impl->max_body = max_body;
  boost::system::error_code ec;
  asio::ip::address ip = asio::ip::make_address(address, ec);
  if (ec)
    return absl::InvalidArgumentError(StrCat("listen address \"", address, "\": ", ec.message()));
  tcp::endpoint endpoint(ip, port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        StrCat("cannot listen on ", address, ":", port, ": ", ec.message()));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->Accept(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() {
  {
    // A watch being streamed ends now rather than at its next once-a-second return.
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    for (WatchSource* watch : impl_->watches) watch->Cancel();
  }
  {
    boost::system::error_code ec;
    tcp::socket poke(impl_->io);
    poke.connect(tcp::endpoint(impl_->acceptor.local_endpoint(ec).address(), impl_->port), ec);
  }
  impl_->accept_thread.join();
  std::list<Impl::Connection> connections;
  {
    std::lock_guard lock(impl_->mu);
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
    for (auto& c : impl_->connections) c.socket->shutdown(tcp::socket::shutdown_both, ec);
    connections.swap(impl_->connections);
  }
  for (Impl::Connection& c : connections) c.thread.join();
}

uint16_t HttpServer::port() const { return impl_->port; }

size_t HttpServer::ConnectionThreads() const {
  std::lock_guard lock(impl_->mu);
  return impl_->connections.size();
}

bool HttpServer::WaitUntilIdle(absl::Duration timeout) const {
  std::unique_lock lock(impl_->mu);
  return impl_->idle_cv.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                                 [&] { return impl_->serving == 0; });
}

std::string HttpServer::url() const {
  boost::system::error_code ec;
  return StrCat("http://", impl_->acceptor.local_endpoint(ec).address().to_string(), ":",
                impl_->port);
}

}  // namespace lockstep::local
