#include "trainer/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "trainer/data/batcher.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/model/model.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("lockstep_ckpt_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    cpu::SetCpuThreads(1);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static CheckpointState Sample(int64_t step) {
    CheckpointState s{
        .step = step, .epoch = 2, .epoch_step = 3, .model = "mlp", .optimizer = "adam"};
    s.params.push_back(Tensor({2, 3}, {1, 2, 3, 4, 5, static_cast<float>(step)}));
    s.optimizer_state.push_back(Tensor({1}, 7.0f));
    return s;
  }
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripsAndKeepsTheNewestK) {
  for (int64_t step : {10, 20, 30, 40}) ASSERT_TRUE(WriteCheckpoint(dir_, Sample(step), 2).ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-000000000030.lsc", "ckpt-000000000040.lsc"}));
  std::vector<std::string> skipped;
  auto latest = LoadLatestCheckpoint(dir_, &skipped);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 40);
  EXPECT_EQ((*latest)->epoch_step, 3);
  EXPECT_EQ((*latest)->params[0], Sample(40).params[0]);
  EXPECT_EQ((*latest)->optimizer_state[0], Sample(40).optimizer_state[0]);
  EXPECT_TRUE(skipped.empty());
}

TEST_F(CheckpointTest, TruncatedOrBitFlippedIsSkippedForTheOlderOne) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(1), 5).ok());
  std::string p2 = *WriteCheckpoint(dir_, Sample(2), 5);
  std::string p3 = *WriteCheckpoint(dir_, Sample(3), 5);
  fs::resize_file(p3, fs::file_size(p3) - 7);  // truncated
  {
    std::fstream f(p2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    char c = 0;
    f.seekg(40);
    f.get(c);
    f.seekp(40);
    f.put(static_cast<char>(c ^ 0x10));  // one bit flipped
  }
  std::vector<std::string> skipped;
  auto latest = LoadLatestCheckpoint(dir_, &skipped);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 1);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("ckpt-000000000003.lsc"), std::string::npos);
  EXPECT_NE(skipped[0].find("checksum"), std::string::npos);
  EXPECT_NE(skipped[1].find("ckpt-000000000002.lsc"), std::string::npos);
}

TEST_F(CheckpointTest, EmptyDirectoryHasNone) {
  std::vector<std::string> skipped;
  auto latest = LoadLatestCheckpoint(dir_, &skipped);
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
}

// An evaluator asks only for checkpoints past the step it scored: older files are not read
// (a corrupt one among them is not even reported), newer ones are, corrupt ones skipped.
TEST_F(CheckpointTest, OnlyCheckpointsPastAStepAreRead) {
  for (int64_t step : {100, 200, 300}) ASSERT_TRUE(WriteCheckpoint(dir_, Sample(step), 5).ok());
  fs::resize_file(fs::path(dir_) / "ckpt-000000000100.lsc", 20);
  std::vector<std::string> skipped;
  auto none = LoadLatestCheckpoint(dir_, &skipped, 300);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_TRUE(skipped.empty());
  auto newer = LoadLatestCheckpoint(dir_, &skipped, 200);
  ASSERT_TRUE(newer.ok() && newer->has_value());
  EXPECT_EQ((*newer)->step, 300);
  fs::resize_file(fs::path(dir_) / "ckpt-000000000300.lsc", 20);
  auto past_corrupt = LoadLatestCheckpoint(dir_, &skipped, 150);
  ASSERT_TRUE(past_corrupt.ok() && past_corrupt->has_value());
  EXPECT_EQ((*past_corrupt)->step, 200);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("ckpt-000000000300.lsc"), std::string::npos);
  auto only_corrupt = LoadLatestCheckpoint(dir_, &skipped, 200);
  ASSERT_TRUE(only_corrupt.ok());
  EXPECT_FALSE(only_corrupt->has_value());
}

// Train `steps` steps from `start` (or from scratch), optionally checkpointing at `save_at`.
std::vector<Tensor> Train(const std::string& name, const Dataset& d, int64_t steps,
                          const std::optional<CheckpointState>& start, int64_t save_at,
                          const std::string& dir) {
  auto model = *BuildModel(name, 11);
  auto opt = *MakeOptimizer("sgd", 0.05f, 0.9f);
  opt->Init(model->Params());
  int64_t step = 0, epoch = 0, epoch_step = 0;
  if (start) {
    for (size_t i = 0; i < start->params.size(); ++i) *model->Params()[i] = start->params[i];
    std::vector<Tensor*> state = opt->State();
    for (size_t i = 0; i < state.size(); ++i) *state[i] = start->optimizer_state[i];
    step = start->step;
    epoch = start->epoch;
    epoch_step = start->epoch_step;
  }
  Batcher batches(&d, {.global_batch = 16, .seed = 3}, epoch, epoch_step);
  for (; step < steps; ++step) {
    Batch b = batches.Next();
    model->TrainStep(b);
    opt->Step(model->Params(), model->Grads());
    if (step + 1 == save_at) {
      CheckpointState s{.step = step + 1, .model = name, .optimizer = "sgd"};
      s.epoch = b.step + 1 == batches.steps_per_epoch() ? b.epoch + 1 : b.epoch;
      s.epoch_step = (b.step + 1) % batches.steps_per_epoch();
      for (Tensor* t : model->Params()) s.params.push_back(*t);
      for (Tensor* t : opt->State()) s.optimizer_state.push_back(*t);
      EXPECT_TRUE(WriteCheckpoint(dir, s, 3).ok());
    }
  }
  std::vector<Tensor> out;
  for (Tensor* t : model->Params()) out.push_back(*t);
  return out;
}

TEST_F(CheckpointTest, ResumeReproducesTheUninterruptedRunExactly) {
  Dataset d = SyntheticDataset(80, 4);  // 5 steps per epoch: the resume crosses an epoch
  for (const char* name : {"mlp", "cnn"}) {
    std::vector<Tensor> straight = Train(name, d, 12, std::nullopt, 7, dir_);
    std::vector<std::string> skipped;
    auto saved = LoadLatestCheckpoint(dir_, &skipped);
    ASSERT_TRUE(saved.ok() && saved->has_value());
    EXPECT_EQ((*saved)->step, 7);
    std::vector<Tensor> resumed = Train(name, d, 12, **saved, -1, dir_);
    ASSERT_EQ(straight.size(), resumed.size());
    for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(straight[i], resumed[i]) << name << i;
    fs::remove_all(dir_);
  }
}

}  // namespace
}  // namespace lockstep::trainer
