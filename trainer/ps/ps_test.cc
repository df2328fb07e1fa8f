// ParameterServer: the placement plan, the shard store's async and sync (backup worker) rules,
// the token on the variable service, and whole runs with PS servers and trainers as threads:
// training converges, and a worker that stops does not stop the others.
#include <filesystem>
#include <thread>

#include "gtest/gtest.h"
#include "trainer/ps/partition.h"
#include "trainer/ps/ps_service.h"
#include "trainer/ps/ps_training.h"

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

struct Cluster {
  std::vector<std::unique_ptr<PsServer>> ps;
  TfConfig tf;
};

Cluster MakeCluster(int nps, int workers) {
  Cluster c;
  for (int i = 0; i < nps; ++i) {
    c.ps.push_back(std::move(*PsServer::Start("127.0.0.1", 0, "tok")));
    c.tf.cluster["ps"].push_back("127.0.0.1:" + std::to_string(c.ps.back()->port()));
  }
  for (int i = 0; i < workers; ++i) c.tf.cluster["worker"].push_back("127.0.0.1:1");
  return c;
}

TrainerConfig PsConfig(const Cluster& cl, int index, const std::string& dir) {
  TrainerConfig c;
  c.strategy = Strategy::kParameterServer;
  c.dataset = "synthetic";
  c.synthetic_size = 4096;
  c.batch_size = 32;
  c.epochs = 2;
  c.job_token = "tok";
  c.checkpoint_dir = dir;
  c.peer_timeout_seconds = 10;
  c.tf_config = cl.tf;
  c.tf_config->task_type = "worker";
  c.tf_config->task_index = index;
  return c;
}

TEST(PsTrainingTest, TwoWorkersOverTwoParameterServersTrainAndCheckpoint) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("lockstep-ps-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Cluster cl = MakeCluster(2, 2);
  std::atomic<bool> no_stop{false};
  std::vector<absl::StatusOr<TrainResult>> out(2, absl::UnknownError("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < 2; ++i) {
    t.emplace_back([&, i] { out[i] = RunPsTrainer(PsConfig(cl, i, dir), nullptr, &no_stop); });
  }
  for (auto& x : t) x.join();
  for (auto& r : out) ASSERT_TRUE(r.ok()) << r.status();
  const int64_t total = PsTotalSteps(PsConfig(cl, 0, dir), 4096, 2);
  EXPECT_EQ(out[0]->steps, total);
  EXPECT_GT(out[0]->test_accuracy, 0.5);  // 10 classes: chance is 0.1
  std::vector<std::string> skipped;
  auto ck = LoadLatestCheckpoint(dir, &skipped);
  ASSERT_TRUE(ck.ok() && ck->has_value());
  EXPECT_EQ((*ck)->step, total);
  std::filesystem::remove_all(dir);
}

TEST(PsTrainingTest, AWorkerThatStopsDoesNotStopTheOthers) {
  Cluster cl = MakeCluster(1, 2);
  std::atomic<bool> no_stop{false}, stop_worker1{false};
  absl::StatusOr<TrainResult> w0 = absl::UnknownError("not run");
  std::thread t0([&] { w0 = RunPsTrainer(PsConfig(cl, 0, ""), nullptr, &no_stop); });
  std::thread t1([&] {
    // Worker 1 leaves once the variables have moved.
    while (cl.ps[0]->store().version() < 20) std::this_thread::yield();
    stop_worker1 = true;
  });
  absl::StatusOr<TrainResult> w1 = RunPsTrainer(PsConfig(cl, 1, ""), nullptr, &stop_worker1);
  t1.join();
  t0.join();
  EXPECT_TRUE(absl::IsCancelled(w1.status())) << w1.status();
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_EQ(w0->steps, PsTotalSteps(PsConfig(cl, 0, ""), 4096, 2));
}

}  // namespace
}  // namespace lockstep::trainer::ps
