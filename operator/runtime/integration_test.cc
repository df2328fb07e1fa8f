// The real HTTP transport, REST client, watcher and informer against an API server on
// 127.0.0.1 (TestApiServer), with the real clock. Waits are on conditions, never sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "operator/kube/api_error.h"
#include "operator/kube/connect.h"
#include "operator/kube/cpprest_transport.h"
#include "operator/kube/pod.h"
#include "operator/kube/testing/test_api_server.h"
#include "operator/runtime/informer.h"

namespace lockstep::runtime {
namespace {

using kube::testing::TestApiServer;
using nlohmann::json;
using ::testing::HasSubstr;

json PodJson(const std::string& name, const std::string& phase = "Pending") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "ns"}}},
          {"status", {{"phase", phase}}}};
}

std::shared_ptr<kube::Transport> Plain(const TestApiServer& server) {
  return std::shared_ptr<kube::Transport>(kube::NewHttpTransport({.server = server.url()}).value());
}

TEST(HttpIntegrationTest, CrudRoundTripsAndConflicts) {
  TestApiServer server;
  kube::RestClient client(Plain(server));
  const kube::Resource& pods = kube::resources::kPods;

  absl::StatusOr<json> created = client.Create(pods, "ns", PodJson("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(kube::IsApiAlreadyExists(client.Create(pods, "ns", PodJson("a")).status()));

  absl::StatusOr<json> got = client.Get(pods, "ns", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["metadata"]["resourceVersion"], (*created)["metadata"]["resourceVersion"]);

  absl::StatusOr<json> patched =
      client.Patch(pods, "ns", "a", kube::PatchType::kMerge, {{"status", {{"phase", "Running"}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["status"]["phase"], "Running");

  // An update from the stale copy conflicts; from the fresh one it goes through.
  json stale = *got;
  stale["status"]["phase"] = "Failed";
  absl::Status conflict = client.Update(pods, "ns", stale).status();
  EXPECT_TRUE(kube::IsApiConflict(conflict)) << conflict;
  EXPECT_THAT(std::string(conflict.message()), HasSubstr("the object has been modified"));
  json fresh = *patched;
  fresh["status"]["phase"] = "Succeeded";
  ASSERT_TRUE(client.Update(pods, "ns", fresh).ok());

  absl::StatusOr<json> list = client.ListAll(pods, "ns");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["items"][0]["status"]["phase"], "Succeeded");

  ASSERT_TRUE(client.Delete(pods, "ns", "a").ok());
  EXPECT_TRUE(kube::IsApiNotFound(client.Get(pods, "ns", "a").status()));
}

// Collects what an informer's handlers saw, and lets a test wait for a condition on it.
class Observer {
 public:
  explicit Observer(Informer<kube::Pod>& informer) {
    informer.AddHandlers({
        .on_add = [this](const auto& p) { Note("add " + Describe(*p)); },
        .on_update = [this](const auto&, const auto& p) { Note("update " + Describe(*p)); },
        .on_delete = [this](const auto& p) { Note("delete " + p->metadata.name); },
    });
  }
  void WaitFor(const std::string& entry) {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(
        cv_.wait_for(lock, std::chrono::seconds(60),
                     [&] { return std::find(log_.begin(), log_.end(), entry) != log_.end(); }))
        << "never saw " << entry;
  }
  std::vector<std::string> log() {
    std::lock_guard lock(mu_);
    return log_;
  }

 private:
  static std::string Describe(const kube::Pod& p) { return p.metadata.name + " " + p.phase; }
  void Note(std::string entry) {
    std::lock_guard lock(mu_);
    log_.push_back(std::move(entry));
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
};

class InformerIntegrationTest : public ::testing::Test {
 protected:
  void Run() {
    thread_ = std::jthread([this](std::stop_token stop) { informer_.Run(stop); });
    std::stop_source never;
    ASSERT_TRUE(informer_.WaitForSync(never.get_token()));
  }

  TestApiServer server_;
  kube::RestClient client_{Plain(server_)};
  std::unique_ptr<common::Clock> clock_ = common::NewRealClock();
  Informer<kube::Pod> informer_{
      &client_,
      kube::resources::kPods,
      kube::DecodePod,
      {.namespace_ = "ns",
       .backoff = {.initial = absl::Milliseconds(10), .max = absl::Milliseconds(100)}},
      clock_.get()};
  Observer observer_{informer_};
  std::jthread thread_;
};

TEST_F(InformerIntegrationTest, ListThenWatchDeliversChanges) {
  server_.Put(PodJson("a"));
  Run();
  EXPECT_EQ(informer_.cache().size(), 1u);
  server_.Put(PodJson("a", "Running"));
  server_.Put(PodJson("b"));
  server_.Delete("ns", "a");
  observer_.WaitFor("delete a");
  EXPECT_THAT(observer_.log(), ::testing::ElementsAre("add a Pending", "update a Running",
                                                      "add b Pending", "delete a"));
  EXPECT_EQ(informer_.cache().Get("ns/a"), nullptr);
  ASSERT_NE(informer_.cache().Get("ns/b"), nullptr);
}

TEST_F(InformerIntegrationTest, DroppedWatchResumesWithoutLosingAnEvent) {
  Run();
  server_.Put(PodJson("a"));
  observer_.WaitFor("add a Pending");
  server_.DropWatches();
  // Changes while the watch is down (or reconnecting) must all arrive, in order.
  for (const char* phase : {"Running", "Failed", "Pending", "Succeeded"}) {
    server_.Put(PodJson("a", phase));
  }
  observer_.WaitFor("update a Succeeded");
  EXPECT_THAT(observer_.log(),
              ::testing::ElementsAre("add a Pending", "update a Running", "update a Failed",
                                     "update a Pending", "update a Succeeded"));
  EXPECT_GE(server_.watches(), 2);
}

TEST_F(InformerIntegrationTest, GoneRelistsAndReconcilesTheCache) {
  server_.Put(PodJson("a"));
  server_.Put(PodJson("b"));
  Run();
  // The changes below come after the first list (else they are simply listed, and the test
  // checks nothing; under load the list used to race them).
  observer_.WaitFor("add a Pending");
  observer_.WaitFor("add b Pending");
  server_.DropWatches();
  server_.Delete("ns", "a");
  server_.Put(PodJson("b", "Running"));
  server_.Put(PodJson("c"));
  server_.Compact();  // the watcher's version is gone: it must relist
  observer_.WaitFor("add c Pending");
  observer_.WaitFor("delete a");
  observer_.WaitFor("update b Running");
  EXPECT_EQ(informer_.cache().size(), 2u);
  EXPECT_EQ(informer_.cache().Get("ns/a"), nullptr);
}

// A raw TCP peer that answers with whatever bytes a test gives it (or nothing).
class RawServer {
 public:
  explicit RawServer(std::string reply) : reply_(std::move(reply)) {
    acceptor_.open(boost::asio::ip::tcp::v4());
    acceptor_.bind({boost::asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] {
      boost::asio::ip::tcp::socket s(io_);
      boost::system::error_code ec;
      acceptor_.accept(s, ec);
      if (ec) return;
      char buf[4096];
      s.read_some(boost::asio::buffer(buf), ec);
      if (!reply_.empty()) boost::asio::write(s, boost::asio::buffer(reply_), ec);
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return done_; });
    });
  }
  ~RawServer() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    boost::system::error_code ec;
    boost::asio::ip::tcp::socket poke(io_);
    poke.connect({boost::asio::ip::make_address("127.0.0.1"), port_}, ec);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string reply_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  unsigned short port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

TEST(HttpTransportTest, ConnectionRefusedIsUnavailable) {
  unsigned short port;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }  // closed again: nothing listens there now
  auto t = kube::NewHttpTransport({.server = "http://127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<kube::HttpResponse> r = (*t)->Send({.target = "/api"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

TEST(HttpTransportTest, ASilentServerTimesOut) {
  RawServer silent("");
  auto t = kube::NewHttpTransport({.server = silent.url()});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<kube::HttpResponse> r =
      (*t)->Send({.target = "/api", .timeout = absl::Milliseconds(300)});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
}

TEST(HttpTransportTest, MalformedResponsesAreErrorsNotCrashes) {
  {
    RawServer garbage("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!");
    kube::RestClient client(std::shared_ptr<kube::Transport>(
        kube::NewHttpTransport({.server = garbage.url()}).value()));
    EXPECT_EQ(client.Get(kube::resources::kPods, "ns", "p").status().code(),
              absl::StatusCode::kDataLoss);
  }
  {
    RawServer noise("\x01\x02 this is not HTTP at all\r\n\r\n");
    kube::RestClient client(std::shared_ptr<kube::Transport>(
        kube::NewHttpTransport({.server = noise.url(), .connect_timeout = absl::Seconds(1)})
            .value()));
    absl::Status s = client.Get(kube::resources::kPods, "ns", "p").status();
    EXPECT_FALSE(s.ok());
  }
  {
    RawServer truncated("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"kind\":");
    kube::RestClient client(std::shared_ptr<kube::Transport>(
        kube::NewHttpTransport({.server = truncated.url(), .connect_timeout = absl::Seconds(1)})
            .value()));
    absl::Status s = client.Get(kube::resources::kPods, "ns", "p").status();
    EXPECT_FALSE(s.ok());
  }
}

// TLS: a throwaway CA, a server certificate for 127.0.0.1 and a client certificate, made
// with the openssl command-line tool.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("lockstep-tls-" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    std::string script = "cd " + dir_->string() + R"( && set -e
      key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out $1 2>/dev/null; }
      key ca.key; key server.key; key client.key; key other.key
      openssl req -x509 -new -key ca.key -subj /CN=test-ca -days 1 -out ca.crt
      openssl req -x509 -new -key other.key -subj /CN=other-ca -days 1 -out other.crt
      printf 'subjectAltName=IP:127.0.0.1\n' > server.ext
      openssl req -new -key server.key -subj /CN=apiserver -out server.csr
      openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile server.ext -out server.crt 2>/dev/null
      openssl req -new -key client.key -subj /CN=operator -out client.csr
      openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -out client.crt 2>/dev/null
    )";
    ok_ = std::system(script.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    if (!ok_) GTEST_SKIP() << "openssl could not make test certificates";
  }
  static std::string Read(const std::string& name) {
    std::ifstream in(*dir_ / name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static absl::Status Probe(const kube::RestConfig& config) {
    std::unique_ptr<common::Clock> clock = common::NewRealClock();
    absl::StatusOr<std::shared_ptr<kube::Transport>> t = kube::Connect(config, clock.get());
    if (!t.ok()) return t.status();
    kube::RestClient client(*t, {.timeout = absl::Seconds(20)});
    return client.List(kube::resources::kPods, "ns").status();
  }

  static inline std::filesystem::path* dir_ = nullptr;
  static inline bool ok_ = false;
};

TEST_F(TlsTest, VerifiesTheServerAgainstTheGivenCa) {
  TestApiServer server({.cert_pem = Read("server.crt"), .key_pem = Read("server.key")});
  EXPECT_TRUE(Probe({.server = server.url(), .ca_pem = Read("ca.crt")}).ok());
  absl::Status wrong_ca = Probe({.server = server.url(), .ca_pem = Read("other.crt")});
  EXPECT_EQ(wrong_ca.code(), absl::StatusCode::kUnavailable) << wrong_ca;
  EXPECT_FALSE(Probe({.server = server.url()}).ok());  // system roots do not know our CA
  EXPECT_TRUE(Probe({.server = server.url(), .insecure_skip_tls_verify = true}).ok());
}

TEST_F(TlsTest, ClientCertificatesAndBearerTokens) {
  TestApiServer server({.cert_pem = Read("server.crt"),
                        .key_pem = Read("server.key"),
                        .client_ca_pem = Read("ca.crt"),
                        .required_token = "t0ken"});
  kube::RestConfig config{.server = server.url(),
                          .ca_pem = Read("ca.crt"),
                          .client_cert_pem = Read("client.crt"),
                          .client_key_pem = Read("client.key"),
                          .bearer_token = "t0ken"};
  EXPECT_TRUE(Probe(config).ok());
  kube::RestConfig wrong_token = config;
  wrong_token.bearer_token = "nope";
  EXPECT_EQ(Probe(wrong_token).code(), absl::StatusCode::kUnauthenticated);
  kube::RestConfig no_cert = config;
  no_cert.client_cert_pem.clear();
  no_cert.client_key_pem.clear();
  EXPECT_EQ(Probe(no_cert).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace lockstep::runtime
