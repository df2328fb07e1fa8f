#include "operator/kube/label_selector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep::kube {
namespace {

using Labels = std::map<std::string, std::string>;

TEST(LabelSelectorTest, Operators) {
  struct Case {
    const char* selector;
    Labels labels;
    bool match;
  } cases[] = {
      {"", {}, true},
      {"app=web", {{"app", "web"}}, true},
      {"app==web", {{"app", "web"}}, true},
      {"app=web", {{"app", "db"}}, false},
      {"app!=web", {{"app", "db"}}, true},
      {"app!=web", {}, true},
      {"env in (a, b)", {{"env", "b"}}, true},
      {"env in (a,b)", {{"env", "c"}}, false},
      {"env notin (a,b)", {{"env", "c"}}, true},
      {"env notin (a,b)", {}, true},
      {"gpu", {{"gpu", ""}}, true},
      {"gpu", {}, false},
      {"!legacy", {}, true},
      {"!legacy", {{"legacy", "1"}}, false},
      {"lockstep.io/job-name=j,lockstep.io/replica-type=worker",
       {{"lockstep.io/job-name", "j"}, {"lockstep.io/replica-type", "worker"}},
       true},
      {"a=1, b=2", {{"a", "1"}}, false},
      {"instance", {{"instance", "x"}}, true},
  };
  for (const Case& c : cases) {
    absl::StatusOr<LabelSelector> s = LabelSelector::Parse(c.selector);
    ASSERT_TRUE(s.ok()) << c.selector << ": " << s.status();
    EXPECT_EQ(s->Matches(c.labels), c.match) << c.selector;
  }
}

TEST(LabelSelectorTest, RoundTripsThroughToString) {
  absl::StatusOr<LabelSelector> s = LabelSelector::Parse("a=1,b!=2,c in (x,y),d notin (z),e,!f");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "a=1,b!=2,c in (x,y),d notin (z),e,!f");
  EXPECT_EQ(LabelSelector::FromMap({{"k", "v"}, {"a", "b"}}).ToString(), "a=b,k=v");
}

TEST(LabelSelectorTest, SyntaxErrorsSayWhere) {
  for (const char* bad : {"=x", "a in x", "a in (x", "a=1 b=2", "a,,b", "!"}) {
    absl::StatusOr<LabelSelector> s = LabelSelector::Parse(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("at offset")) << bad;
  }
}

}  // namespace
}  // namespace lockstep::kube
