// The local API server over real HTTP, driven by the operator's own client and informer.
#include "operator/local/apiserver/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <condition_variable>
#include <thread>

#include "operator/kube/api_error.h"
#include "operator/kube/cpprest_transport.h"
#include "operator/kube/pod.h"
#include "operator/runtime/informer.h"

namespace lockstep::local {
namespace {

using nlohmann::json;

json Pod(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}}},
          {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = ApiServer::Create({.bookmark_interval = absl::Milliseconds(200)}).value();
    http_ = HttpServer::Start(api_.get()).value();
    transport_ =
        std::shared_ptr<kube::Transport>(kube::NewHttpTransport({.server = http_->url()}).value());
    client_ = std::make_unique<kube::RestClient>(transport_);
  }

  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<kube::Transport> transport_;
  std::unique_ptr<kube::RestClient> client_;
};

TEST_F(HttpServerTest, ClientRoundTrips) {
  const kube::Resource& pods = kube::resources::kPods;
  absl::StatusOr<json> created = client_->Create(pods, "default", Pod("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(kube::IsApiAlreadyExists(client_->Create(pods, "default", Pod("a")).status()));
  EXPECT_TRUE(kube::IsApiNotFound(client_->Get(pods, "default", "b").status()));
  absl::StatusOr<json> patched =
      client_->Patch(pods, "default", "a", kube::PatchType::kStrategicMerge,
                     {{"metadata", {{"labels", {{"app", "web"}}}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  absl::Status stale = client_->Update(pods, "default", *created).status();
  EXPECT_TRUE(kube::IsApiConflict(stale)) << stale;
  absl::StatusOr<json> list =
      client_->ListAll(pods, "default", {.label_selector = "app=web", .limit = 1});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["items"].size(), 1u);
  json invalid = Pod("Not_Valid");
  absl::Status bad = client_->Create(pods, "default", invalid).status();
  EXPECT_TRUE(kube::IsApiInvalid(bad)) << bad;
  ASSERT_EQ(kube::GetApiError(bad)->causes.at(0).field, "metadata.name");
  ASSERT_TRUE(client_->Delete(pods, "default", "a").ok());
}

TEST_F(HttpServerTest, InformerFollowsTheServer) {
  std::unique_ptr<common::Clock> clock = common::NewRealClock();
  runtime::Informer<kube::Pod> informer(client_.get(), kube::resources::kPods, kube::DecodePod,
                                        {.namespace_ = "default"}, clock.get());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> seen;
  informer.AddHandlers({.on_add =
                            [&](const auto& p) {
                              std::lock_guard lock(mu);
                              seen.push_back("add " + p->metadata.name);
                              cv.notify_all();
                            },
                        .on_delete =
                            [&](const auto& p) {
                              std::lock_guard lock(mu);
                              seen.push_back("delete " + p->metadata.name);
                              cv.notify_all();
                            }});
  ASSERT_TRUE(client_->Create(kube::resources::kPods, "default", Pod("before")).ok());
  std::jthread run([&](std::stop_token stop) { informer.Run(stop); });
  std::stop_source never;
  ASSERT_TRUE(informer.WaitForSync(never.get_token()));
  ASSERT_TRUE(client_->Create(kube::resources::kPods, "default", Pod("after")).ok());
  ASSERT_TRUE(client_->Delete(kube::resources::kPods, "default", "before").ok());
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return seen.size() >= 3; }));
  EXPECT_THAT(seen, ::testing::ElementsAre("add before", "add after", "delete before"));
}

// Sends raw bytes and returns what came back before the server closed or went quiet.
std::string Raw(uint16_t port, const std::string& bytes) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  s.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  boost::system::error_code ec;
  boost::asio::write(s, boost::asio::buffer(bytes), ec);  // the server may answer and close early
  s.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ec);
  std::string out;
  char buf[4096];
  while (size_t n = s.read_some(boost::asio::buffer(buf), ec)) out.append(buf, n);
  return out;
}

TEST_F(HttpServerTest, BadRequestsNeverTakeTheServerDown) {
  EXPECT_EQ(Raw(http_->port(), "\x16\x03\x01 not http at all\r\n\r\n"), "");
  std::string big = "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                    std::to_string(4 << 20) + "\r\n\r\n";  // refused on its header alone
  EXPECT_THAT(Raw(http_->port(), big), ::testing::HasSubstr("413"));
  std::string bad_json =
      "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
      "Connection: close\r\n\r\n{nope";
  EXPECT_THAT(Raw(http_->port(), bad_json), ::testing::HasSubstr("\"code\":400"));
  // Still serving.
  EXPECT_TRUE(client_->List(kube::resources::kPods, "default").ok());
}

// A thread that ended but was never joined keeps its stack (8 MiB) mapped, so a server that
// forgot its finished connections would grow by one stack per connection. The threads are
// counted, not the memory (which malloc arenas move under load), and not through
// /proc/self/task, which lists only threads still running: an ended, unjoined one is not
// there, though its stack is.
TEST_F(HttpServerTest, FinishedConnectionsDoNotAccumulateThreads) {
  std::string get =
      "GET /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (int i = 0; i < 100; ++i) {
    ASSERT_THAT(Raw(http_->port(), get), ::testing::HasSubstr("PodList"));
  }
  // The server closed each of those connections; once their threads have all ended, the next
  // connection joins them, and only its own thread is left.
  ASSERT_TRUE(http_->WaitUntilIdle(absl::Seconds(60)));
  ASSERT_THAT(Raw(http_->port(), get), ::testing::HasSubstr("PodList"));
  EXPECT_EQ(http_->ConnectionThreads(), 1u);
}

}  // namespace
}  // namespace lockstep::local
