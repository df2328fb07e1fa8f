#include "operator/trainingjob/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/http_endpoints.h"

namespace lockstep::trainingjob {
namespace {

using ::testing::HasSubstr;

TEST(ProgressTest, ParsesTheTrainersJson) {
  absl::StatusOr<api::Progress> p = ParseProgress(
      R"({"step":450,"totalSteps":1000,"epoch":2,"loss":0.41,"metrics":{"accuracy":0.87},)"
      R"("samplesPerSecond":5400.5,"lastCheckpointStep":400,"estimatedRemainingSeconds":95,)"
      R"("summary":"ignored","updateTime":"2020-01-01T00:00:00Z","extra":1})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 450);
  EXPECT_EQ(p->total_steps, 1000);
  EXPECT_EQ(p->epoch, 2);
  EXPECT_EQ(p->loss, 0.41);
  EXPECT_EQ(p->metrics.at("accuracy"), 0.87);
  EXPECT_EQ(p->samples_per_second, 5400.5);
  EXPECT_EQ(p->last_checkpoint_step, 400);
  EXPECT_EQ(p->estimated_remaining_seconds, 95);
  EXPECT_EQ(p->summary, "");  // the operator's to write
  EXPECT_FALSE(p->update_time.has_value());
}

TEST(ProgressTest, BadBodiesNameTheProblem) {
  EXPECT_THAT(std::string(ParseProgress("not json").status().message()),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(std::string(ParseProgress(R"({"step":"many"})").status().message()),
              HasSubstr("progress.step"));
}

TEST(ProgressTest, FetchesOverHttp) {
  auto server = common::EndpointServer::Start(
      "127.0.0.1:0", [](const std::string& path) -> common::EndpointResponse {
        if (path == "/progress") return {200, "application/json", R"({"step":7,"totalSteps":70})"};
        return {404, "text/plain", ""};
      });
  ASSERT_TRUE(server.ok());
  std::unique_ptr<ProgressSource> source = NewHttpProgressSource();
  absl::StatusOr<api::Progress> p = source->Fetch("127.0.0.1", (*server)->port());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 7);
  EXPECT_EQ(p->total_steps, 70);
}

TEST(ProgressTest, ErrorStatusIsUnavailable) {
  auto server = common::EndpointServer::Start("127.0.0.1:0",
                                              [](const std::string&) -> common::EndpointResponse {
                                                return {503, "text/plain", ""};
                                              });
  ASSERT_TRUE(server.ok());
  absl::StatusOr<api::Progress> p = NewHttpProgressSource()->Fetch("127.0.0.1", (*server)->port());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace lockstep::trainingjob
