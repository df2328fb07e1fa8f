#include "operator/kube/testing/test_api_server.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace lockstep::kube::testing {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;
using nlohmann::json;

constexpr char kPrefix[] = "/api/v1/namespaces/";

json StatusJson(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
          {"code", code},     {"reason", reason},   {"message", message}};
}

std::map<std::string, std::string> QueryOf(const std::string& target) {
  std::map<std::string, std::string> q;
  size_t at = target.find('?');
  if (at == std::string::npos) return q;
  std::string rest = target.substr(at + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t amp = rest.find('&', pos);
    std::string part = rest.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    size_t eq = part.find('=');
    if (eq != std::string::npos) q[part.substr(0, eq)] = part.substr(eq + 1);
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return q;
}

}  // namespace

struct TestApiServer::Impl {
  TestApiServerOptions options;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::unique_ptr<asio::ssl::context> tls;
  std::thread accept_thread;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  int64_t rv = 100;
  int64_t oldest = 100;  // history starts after this version
  int watches = 0;
  std::map<std::string, json> pods;               // "ns/name"
  std::vector<std::pair<int64_t, json>> history;  // (rv, watch event)
  int64_t drop_generation = 0;
  std::vector<std::shared_ptr<tcp::socket>> sockets;
  std::vector<std::shared_ptr<tcp::socket>> watch_sockets;
  unsigned short port = 0;
  std::vector<std::thread> workers;

  // Requires mu.
  json Record(const std::string& type, json obj) {
    obj["metadata"]["resourceVersion"] = std::to_string(++rv);
    history.emplace_back(rv, json{{"type", type}, {"object", obj}});
    cv.notify_all();
    return obj;
  }

  template <typename Stream>
  void Serve(Stream& stream, const std::shared_ptr<tcp::socket>& socket) {
    boost::beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> req;
      boost::system::error_code ec;
      http::read(stream, buffer, req, ec);
      if (ec) return;
      std::string target(req.target());
      if (!options.required_token.empty() &&
          req[http::field::authorization] != "Bearer " + options.required_token) {
        Reply(stream, req, 401, StatusJson(401, "Unauthorized", "Unauthorized"));
        continue;
      }
      std::map<std::string, std::string> q = QueryOf(target);
      if (req.method() == http::verb::get && q["watch"] == "true") {
        {
          std::lock_guard lock(mu);
          watch_sockets.push_back(socket);
        }
        Watch(stream, req, q);
        return;
      }
      auto [code, body] = Handle(req, target);
      if (!Reply(stream, req, code, body)) return;
    }
  }

  template <typename Stream>
  bool Reply(Stream& stream, const http::request<http::string_body>& req, int code,
             const json& body) {
    http::response<http::string_body> res{static_cast<http::status>(code), req.version()};
    res.set(http::field::content_type, "application/json");
    res.keep_alive(req.keep_alive());
    res.body() = body.dump();
    res.prepare_payload();
    boost::system::error_code ec;
    http::write(stream, res, ec);
    return !ec && req.keep_alive();
  }

  std::pair<int, json> Handle(const http::request<http::string_body>& req,
                              const std::string& target) {
    std::string path = target.substr(0, target.find('?'));
    // /api/v1/namespaces/{ns}/pods[/{name}]
    if (path.rfind(kPrefix, 0) != 0) return {404, StatusJson(404, "NotFound", "no such path")};
    std::string rest = path.substr(sizeof(kPrefix) - 1);
    std::string ns = rest.substr(0, rest.find('/'));
    std::string tail = rest.substr(ns.size());
    if (tail.rfind("/pods", 0) != 0) return {404, StatusJson(404, "NotFound", "no such path")};
    std::string name = tail.size() > 6 ? tail.substr(6) : "";
    std::lock_guard lock(mu);
    std::string key = ns + "/" + name;
    json body = json::parse(req.body().empty() ? "{}" : req.body(), nullptr, false);
    if (body.is_discarded()) return {400, StatusJson(400, "BadRequest", "body is not JSON")};
    switch (req.method()) {
      case http::verb::get: {
        if (name.empty()) {
          json items = json::array();
          for (const auto& [k, pod] : pods) {
            if (k.rfind(ns + "/", 0) == 0) items.push_back(pod);
          }
          return {200,
                  {{"kind", "PodList"},
                   {"metadata", {{"resourceVersion", std::to_string(rv)}}},
                   {"items", items}}};
        }
        auto it = pods.find(key);
        if (it == pods.end())
          return {404, StatusJson(404, "NotFound", "pods \"" + name + "\" not found")};
        return {200, it->second};
      }
      case http::verb::post: {
        std::string new_name = body["metadata"].value("name", "");
        if (pods.contains(ns + "/" + new_name)) {
          return {409,
                  StatusJson(409, "AlreadyExists", "pods \"" + new_name + "\" already exists")};
        }
        body["metadata"]["namespace"] = ns;
        json stored = Record("ADDED", body);
        pods[ns + "/" + new_name] = stored;
        return {201, stored};
      }
      case http::verb::put: {
        auto it = pods.find(key);
        if (it == pods.end()) return {404, StatusJson(404, "NotFound", "not found")};
        if (body["metadata"].value("resourceVersion", "") !=
            it->second["metadata"]["resourceVersion"].get<std::string>()) {
          return {409, StatusJson(409, "Conflict",
                                  "Operation cannot be fulfilled on pods \"" + name +
                                      "\": the object has been modified; please apply your "
                                      "changes to the latest version and try again")};
        }
        it->second = Record("MODIFIED", body);
        return {200, it->second};
      }
      case http::verb::patch: {
        auto it = pods.find(key);
        if (it == pods.end()) return {404, StatusJson(404, "NotFound", "not found")};
        json patched = it->second;
        patched.merge_patch(body);
        it->second = Record("MODIFIED", patched);
        return {200, it->second};
      }
      case http::verb::delete_: {
        auto it = pods.find(key);
        if (it == pods.end()) return {404, StatusJson(404, "NotFound", "not found")};
        json gone = Record("DELETED", it->second);
        pods.erase(it);
        return {200, gone};
      }
      default:
        return {405, StatusJson(405, "MethodNotAllowed", "method not allowed")};
    }
  }

  template <typename Stream>
  void Watch(Stream& stream, const http::request<http::string_body>& req,
             std::map<std::string, std::string>& q) {
    int64_t from = q["resourceVersion"].empty() ? -1 : std::stoll(q["resourceVersion"]);
    std::unique_lock lock(mu);
    ++watches;
    int64_t generation = drop_generation;
    http::response<http::empty_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json");
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    boost::system::error_code ec;
    lock.unlock();
    http::write_header(stream, sr, ec);
    if (ec) return;
    lock.lock();
    if (from == -1) from = rv;
    if (from < oldest) {
      std::string line =
          json{{"type", "ERROR"},
               {"object", StatusJson(410, "Expired",
                                     "too old resource version: " + std::to_string(from) + " (" +
                                         std::to_string(oldest) + ")")}}
              .dump() +
          "\n";
      lock.unlock();
      asio::write(stream, http::make_chunk(asio::buffer(line)), ec);
      asio::write(stream, http::make_chunk_last(), ec);
      return;
    }
    // Track what was sent by version, not by position. Compact() only moves `oldest`: an
    // open watch goes on with every event it has not sent yet, as an API server's does.
    int64_t sent = from;
    auto pending = [&] { return !history.empty() && history.back().first > sent; };
    while (true) {
      cv.wait(lock, [&] { return stopping || drop_generation != generation || pending(); });
      if (stopping || drop_generation != generation) return;  // the socket is already closed
      std::string lines;
      for (const auto& [event_rv, event] : history) {
        if (event_rv <= sent) continue;
        lines += event.dump() + "\n";
        sent = event_rv;
      }
      lock.unlock();
      asio::write(stream, http::make_chunk(asio::buffer(lines)), ec);
      lock.lock();
      if (ec) return;
    }
  }

  void Accept() {
    while (true) {
      auto socket = std::make_shared<tcp::socket>(io);
      boost::system::error_code ec;
      acceptor.accept(*socket, ec);
      std::lock_guard lock(mu);
      if (stopping || ec) return;
      sockets.push_back(socket);
      workers.emplace_back([this, socket] {
        if (tls) {
          asio::ssl::stream<tcp::socket&> stream(*socket, *tls);
          boost::system::error_code hs;
          stream.handshake(asio::ssl::stream_base::server, hs);
          if (!hs) Serve(stream, socket);
        } else {
          Serve(*socket, socket);
        }
        boost::system::error_code ignored;
        socket->shutdown(tcp::socket::shutdown_both, ignored);
      });
    }
  }
};

TestApiServer::TestApiServer(TestApiServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (!impl_->options.cert_pem.empty()) {
    impl_->tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    impl_->tls->use_certificate_chain(asio::buffer(impl_->options.cert_pem));
    impl_->tls->use_private_key(asio::buffer(impl_->options.key_pem), asio::ssl::context::pem);
    if (!impl_->options.client_ca_pem.empty()) {
      impl_->tls->add_certificate_authority(asio::buffer(impl_->options.client_ca_pem));
      impl_->tls->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    }
  }
  tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen();
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept_thread = std::thread([this] { impl_->Accept(); });
}

TestApiServer::~TestApiServer() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    impl_->cv.notify_all();
  }
  {
    // Wake the blocked accept(); it sees `stopping` and returns.
    boost::system::error_code ec;
    tcp::socket poke(impl_->io);
    poke.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), impl_->port), ec);
    impl_->accept_thread.join();
  }
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(impl_->mu);
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
    for (auto& s : impl_->sockets) s->shutdown(tcp::socket::shutdown_both, ec);
    workers.swap(impl_->workers);
  }
  for (std::thread& t : workers) t.join();
}

std::string TestApiServer::url() const {
  return std::string(impl_->tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(impl_->port);
}

json TestApiServer::Put(json pod) {
  std::lock_guard lock(impl_->mu);
  std::string key = pod["metadata"]["namespace"].get<std::string>() + "/" +
                    pod["metadata"]["name"].get<std::string>();
  bool exists = impl_->pods.contains(key);
  json stored = impl_->Record(exists ? "MODIFIED" : "ADDED", std::move(pod));
  impl_->pods[key] = stored;
  return stored;
}

void TestApiServer::Delete(const std::string& ns, const std::string& name) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->pods.find(ns + "/" + name);
  if (it == impl_->pods.end()) return;
  impl_->Record("DELETED", it->second);
  impl_->pods.erase(it);
}

void TestApiServer::DropWatches() {
  std::lock_guard lock(impl_->mu);
  ++impl_->drop_generation;
  boost::system::error_code ec;
  for (auto& s : impl_->watch_sockets) s->shutdown(tcp::socket::shutdown_both, ec);
  impl_->watch_sockets.clear();
  impl_->cv.notify_all();
}

void TestApiServer::Compact() {
  std::lock_guard lock(impl_->mu);
  // New watches from before now get 410 Gone; the history stays for the open ones (clearing
  // it lost an event recorded just before, not yet sent on a watch that reconnected early).
  impl_->oldest = impl_->rv;
}

int TestApiServer::watches() const {
  std::lock_guard lock(impl_->mu);
  return impl_->watches;
}

}  // namespace lockstep::kube::testing
