// The one line format the operator and the trainer share: text and JSON, severities, the sink.
#include "common/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lockstep::common {
namespace {

using ::testing::MatchesRegex;

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogSink([this](Severity s, std::string_view line) {
      severities_.push_back(s);
      lines_.emplace_back(line);
    });
  }
  void TearDown() override {
    SetLogSink(nullptr);
    SetLogFormat(LogFormat::kText);
    SetMinSeverity(Severity::kInfo);
  }
  std::vector<Severity> severities_;
  std::vector<std::string> lines_;
};

TEST_F(LogTest, TextLinesCarryTimeLetterComponentAndMessage) {
  LogInfo("trainer", "step ", 3, " of ", 10);
  LogWarning("checkpoint", "skipping ", "a.ckpt");
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_THAT(lines_[0], MatchesRegex(R"(^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z )"
                                      R"(I trainer\] step 3 of 10$)"));
  EXPECT_THAT(lines_[1], MatchesRegex(R"(^.*Z W checkpoint\] skipping a\.ckpt$)"));
  EXPECT_EQ(severities_, (std::vector<Severity>{Severity::kInfo, Severity::kWarning}));
}

TEST_F(LogTest, JsonLinesAreOneObjectEach) {
  SetLogFormat(LogFormat::kJson);
  LogError("collective", "quote \" and newline\n");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].find('\n'), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(lines_[0]);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["component"], "collective");
  EXPECT_EQ(j["msg"], "quote \" and newline\n");
  EXPECT_THAT(j["ts"].get<std::string>(), MatchesRegex(R"(^[0-9T:.-]+Z$)"));
}

TEST_F(LogTest, MessagesBelowTheMinimumAreDropped) {
  LogDebug("trainer", "hidden");
  SetMinSeverity(Severity::kDebug);
  LogDebug("trainer", "shown");
  SetMinSeverity(Severity::kError);
  LogWarning("trainer", "hidden");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_THAT(lines_[0], MatchesRegex(R"(^.*Z D trainer\] shown$)"));
}

}  // namespace
}  // namespace lockstep::common
