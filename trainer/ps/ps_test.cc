// The parameter-server pieces: the placement plan, the shard store's async and sync (backup
// worker) rules, and the token on the variable service.

#include "gtest/gtest.h"
#include "trainer/ps/partition.h"
#include "trainer/ps/ps_service.h"

namespace lockstep::trainer::ps {
namespace {

TEST(PartitionTest, LargeVariablesSplitOnAxisZeroAndShardsGoRoundRobin) {
  // 256x784 floats (784 KiB) splits over 2 tasks; 256 and 10 floats stay whole.
  std::vector<ShardSpec> s = PlanShards({{256, 784}, {256}, {10, 256}, {10}}, 2);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].param, 0u);
  EXPECT_EQ(s[0].row_begin, 0);
  EXPECT_EQ(s[0].row_end, 128);
  EXPECT_EQ(s[1].row_begin, 128);
  EXPECT_EQ(s[1].offset, 128 * 784);
  EXPECT_EQ(s[1].elements, 128 * 784);
  std::vector<int> tasks;
  for (const auto& x : s) tasks.push_back(x.task);
  EXPECT_EQ(tasks, (std::vector<int>{0, 1, 0, 1, 0}));
  // Never more shards than rows, and one task takes everything.
  EXPECT_EQ(PlanShards({{2, 1 << 20}}, 8).size(), 2u);
  EXPECT_EQ(PlanShards({{256, 784}}, 1).size(), 1u);
}

TEST(VariableStoreTest, AsyncAppliesEveryPushAndInitHappensOnce) {
  VariableStore store;
  StoreConfig c{.optimizer = "sgd", .learning_rate = 0.5f, .momentum = 0.0f};
  int64_t v = 0;
  EXPECT_TRUE(absl::IsFailedPrecondition(store.Pull({0}, 0, absl::Seconds(1), &v).status()));
  ASSERT_FALSE(*store.Init({{0, {1.0f, 2.0f}}}, {}, c, 0));
  EXPECT_TRUE(*store.Init({{0, {9.0f, 9.0f}}}, {}, c, 0));  // already: unchanged
  ASSERT_EQ(store.Push({{0, {2.0f, 2.0f}}}, 0)->version, 1);
  ASSERT_EQ(store.Push({{0, {2.0f, 2.0f}}}, 0)->version, 2);  // old version: applied anyway
  auto got = store.Pull({0}, 0, absl::Seconds(1), &v);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0], (std::vector<float>{-1.0f, 0.0f}));
  EXPECT_EQ(v, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(store.Push({{0, {1.0f}}}, 2).status()));
  EXPECT_TRUE(absl::IsNotFound(store.Pull({7}, 0, absl::Seconds(1), &v).status()));
}

TEST(VariableStoreTest, SyncAveragesTheFirstNAndDropsStaleGradients) {
  VariableStore store;
  StoreConfig c{.optimizer = "sgd",
                .learning_rate = 1.0f,
                .momentum = 0.0f,
                .sync = true,
                .replicas_to_aggregate = 2};
  ASSERT_TRUE(store.Init({{0, {0.0f}}}, {}, c, 0).ok());
  EXPECT_EQ(store.Push({{0, {1.0f}}}, 0)->version, 0);  // waits for a second gradient
  int64_t v = 0;
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.Pull({0}, 1, absl::Milliseconds(50), &v).status()));
  EXPECT_EQ(store.Push({{0, {3.0f}}}, 0)->version, 1);  // average 2 applied
  PushResult late = *store.Push({{0, {100.0f}}}, 0);    // the backup worker: stale
  EXPECT_TRUE(late.dropped);
  auto got = store.Pull({0}, 1, absl::Seconds(1), &v);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0][0], -2.0f);
  EXPECT_EQ(v, 1);
}

TEST(PsServiceTest, CallsWithoutTheJobTokenAreRefused) {
  auto server = PsServer::Start("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok());
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  PsClient intruder({addr}, "guess");
  auto r = intruder.Init(0, {{0, {1.0f}}}, {}, {}, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
  PsClient member({addr}, "tok");
  auto ok = member.Init(0, {{0, {1.0f}}}, {}, {.optimizer = "sgd"}, 0);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE(ok->first);
}

}  // namespace
}  // namespace lockstep::trainer::ps
