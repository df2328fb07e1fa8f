// ParameterServer training as whole runs, PS servers and trainers as threads: training
// converges and checkpoints, exports the final variables, and a worker that stops does not stop
// the others.
#include "trainer/strategy/parameter_server.h"

#include <filesystem>
#include <thread>

#include "gtest/gtest.h"
#include "trainer/model/graph_model.h"
#include "trainer/model/keras_io.h"
#include "trainer/ps/ps_service.h"

namespace lockstep::trainer {
namespace {

using ps::PsServer;

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
  // Worker 0 coordinates and evaluates; the other has no accuracy to report.
  EXPECT_TRUE(out[0]->evaluated);
  EXPECT_FALSE(out[1]->evaluated);
  std::vector<std::string> skipped;
  auto ck = LoadLatestCheckpoint(dir, &skipped);
  ASSERT_TRUE(ck.ok() && ck->has_value());
  EXPECT_EQ((*ck)->step, total);
  std::filesystem::remove_all(dir);
}

// Worker 0 exports the parameter servers' final variables: the same as the final checkpoint's.
TEST(PsTrainingTest, TheExportHoldsTheFinalVariables) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("lockstep-ps-export-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string model = std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/mlp.json";
  Cluster cl = MakeCluster(2, 2);
  std::atomic<bool> no_stop{false};
  std::vector<absl::StatusOr<TrainResult>> out(2, absl::UnknownError("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < 2; ++i) {
    t.emplace_back([&, i] {
      TrainerConfig c = PsConfig(cl, i, dir + "/ckpt");
      c.model = model;
      c.epochs = 1;
      c.model_dir = dir + "/model";
      out[i] = RunPsTrainer(c, nullptr, &no_stop);
    });
  }
  for (auto& x : t) x.join();
  for (auto& r : out) ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> skipped;
  auto ck = LoadLatestCheckpoint(dir + "/ckpt", &skipped);
  ASSERT_TRUE(ck.ok() && ck->has_value());
  absl::StatusOr<std::unique_ptr<GraphModel>> exported = GraphModel::Load(model, 99);
  ASSERT_TRUE(exported.ok()) << exported.status();
  absl::Status s = LoadInitialWeights(**exported, dir + "/model/model.keras");
  ASSERT_TRUE(s.ok()) << s;
  std::vector<Tensor*> params = (*exported)->Params();
  ASSERT_GE((*ck)->params.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->values(), (*ck)->params[i].values()) << "parameter " << i;
  }
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
}  // namespace lockstep::trainer
