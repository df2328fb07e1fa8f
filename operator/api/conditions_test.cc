#include "operator/api/conditions.h"

#include <gtest/gtest.h>

namespace lockstep::api {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Time kT1 = absl::FromUnixSeconds(2000);

TEST(ConditionsTest, SetAppendsAndFinds) {
  std::vector<Condition> conds;
  EXPECT_EQ(FindCondition(conds, ConditionType::kRunning), nullptr);
  EXPECT_TRUE(SetCondition(&conds, ConditionType::kRunning, ConditionStatus::kTrue, "Running",
                           "all pods run", 1, kT0));
  ASSERT_NE(FindCondition(conds, ConditionType::kRunning), nullptr);
  EXPECT_TRUE(IsConditionTrue(conds, ConditionType::kRunning));
  EXPECT_FALSE(IsConditionTrue(conds, ConditionType::kFailed));
  EXPECT_EQ(conds[0].last_transition_time, kT0);
}

TEST(ConditionsTest, SameStatusKeepsTransitionTimeButRefreshesText) {
  std::vector<Condition> conds;
  SetCondition(&conds, ConditionType::kRunning, ConditionStatus::kTrue, "A", "first", 1, kT0);
  EXPECT_TRUE(
      SetCondition(&conds, ConditionType::kRunning, ConditionStatus::kTrue, "B", "second", 2, kT1));
  ASSERT_EQ(conds.size(), 1u);
  EXPECT_EQ(conds[0].last_transition_time, kT0);
  EXPECT_EQ(conds[0].reason, "B");
  EXPECT_EQ(conds[0].message, "second");
  EXPECT_EQ(conds[0].observed_generation, 2);
}

TEST(ConditionsTest, NoChangeReportsFalse) {
  std::vector<Condition> conds;
  SetCondition(&conds, ConditionType::kRunning, ConditionStatus::kTrue, "A", "m", 1, kT0);
  EXPECT_FALSE(
      SetCondition(&conds, ConditionType::kRunning, ConditionStatus::kTrue, "A", "m", 1, kT1));
  EXPECT_EQ(conds[0].last_transition_time, kT0);
}

TEST(ConditionsTest, StatusChangeMovesTransitionTime) {
  std::vector<Condition> conds;
  SetCondition(&conds, ConditionType::kRunning, ConditionStatus::kTrue, "A", "m", 1, kT0);
  EXPECT_TRUE(
      SetCondition(&conds, ConditionType::kRunning, ConditionStatus::kFalse, "A", "m", 1, kT1));
  EXPECT_EQ(conds[0].last_transition_time, kT1);
  EXPECT_FALSE(IsConditionTrue(conds, ConditionType::kRunning));
}

}  // namespace
}  // namespace lockstep::api
