#include "trainer/optim/loss_scale.h"

#include <gtest/gtest.h>

namespace lockstep::trainer {
namespace {

TEST(LossScaler, StartsAt2To15AndDoublesAfter2000FiniteSteps) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.finite_streak(), 0);
}

TEST(LossScaler, HalvesAndSkipsOnOverflowAndRestartsTheStreak) {
  LossScaler s;
  for (int i = 0; i < 1500; ++i) s.Update(true);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 16384.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
  // The 1500 earlier finite steps no longer count.
  for (int i = 0; i < 1999; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 16384.0f);
  s.Update(true);
  EXPECT_EQ(s.scale(), 32768.0f);
}

TEST(LossScaler, NeverGoesBelowOne) {
  LossScaler s;
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.skipped_steps(), 40);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 1.0f);
}

TEST(LossScaler, FixedScaleNeverChangesButStillSkipsNonFiniteSteps) {
  LossScaler s = LossScaler::Fixed(1.0f);
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, CustomGrowthInterval) {
  LossScaler s({.initial_scale = 4.0f, .growth_interval = 3});
  s.Update(true);
  s.Update(true);
  EXPECT_EQ(s.scale(), 4.0f);
  s.Update(true);
  EXPECT_EQ(s.scale(), 8.0f);
}

}  // namespace
}  // namespace lockstep::trainer
