#include "common/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/http_endpoints.h"

namespace lockstep::common {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersPrometheusText) {
  MetricsRegistry m;
  m.AddCounter("jobs_total", "Jobs.");
  m.AddGauge("depth", "Depth.");
  m.AddHistogram("latency_seconds", "Latency.", {0.1, 1});
  m.Inc("jobs_total", {{"state", "ok"}});
  m.Inc("jobs_total", {{"state", "ok"}}, 2);
  m.Set("depth", {}, 7);
  m.Observe("latency_seconds", {}, 0.05);
  m.Observe("latency_seconds", {}, 0.5);
  m.Observe("latency_seconds", {}, 5);
  m.Inc("undeclared");  // ignored
  std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE jobs_total counter\njobs_total{state=\"ok\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE depth gauge\ndepth 7\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_bucket{le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_bucket{le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_bucket{le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_sum 5.55\n"));
  EXPECT_THAT(text, HasSubstr("latency_seconds_count 3\n"));
  EXPECT_EQ(text.find("undeclared"), std::string::npos);
  EXPECT_EQ(m.Value("jobs_total", {{"state", "ok"}}), 3);
  EXPECT_EQ(m.Count("latency_seconds"), 3u);
}

TEST(MetricsTest, CollectorsRunAtScrapeAndLabelsAreEscaped) {
  MetricsRegistry m;
  m.AddGauge("g", "G.");
  int scrapes = 0;
  m.AddCollector([&](MetricsRegistry& r) {
    r.ClearGauge("g");
    r.Set("g", {{"v", "a\"b\\c\nd"}}, ++scrapes);
  });
  m.Render();
  EXPECT_THAT(m.Render(), HasSubstr("g{v=\"a\\\"b\\\\c\\nd\"} 2\n"));
}

// GET path on 127.0.0.1:port; returns status and body.
std::pair<int, std::string> Get(uint16_t port, const std::string& path,
                                boost::beast::http::verb verb = boost::beast::http::verb::get) {
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  s.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  http::request<http::string_body> req{verb, path, 11};
  req.set(http::field::host, "localhost");
  http::write(s, req);
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  return {static_cast<int>(res.result_int()), res.body()};
}

TEST(EndpointServerTest, ServesHandlerAndRefusesOtherMethods) {
  absl::StatusOr<std::unique_ptr<EndpointServer>> s =
      EndpointServer::Start("127.0.0.1:0", [](const std::string& path) -> EndpointResponse {
        if (path == "/healthz") return {200, "text/plain", "ok\n"};
        return {404, "text/plain", "nope\n"};
      });
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Get((*s)->port(), "/healthz?verbose=1"), std::make_pair(200, std::string("ok\n")));
  EXPECT_EQ(Get((*s)->port(), "/other").first, 404);
  EXPECT_EQ(Get((*s)->port(), "/healthz", boost::beast::http::verb::post).first, 405);
}

TEST(EndpointServerTest, BadAddressesAreErrors) {
  EXPECT_FALSE(EndpointServer::Start("nonsense", {}).ok());
  EXPECT_FALSE(EndpointServer::Start("127.0.0.1:99999", {}).ok());
  EXPECT_FALSE(EndpointServer::Start("not-an-ip:80", {}).ok());
}

}  // namespace
}  // namespace lockstep::common
