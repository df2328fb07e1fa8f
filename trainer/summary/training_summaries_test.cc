// The training runs' layout and arithmetic: the train run's recorded steps (every N) with the
// rate since the last record, the epoch averages weighted by samples, and the validation run's
// epochs, read back from the event files.
#include "trainer/summary/training_summaries.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "trainer/data/tfrecord.h"
#include "trainer/proto/event.pb.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

// step -> tag -> value, for the events after the file version.
std::map<int64_t, std::map<std::string, float>> ReadRun(const std::string& path) {
  std::map<int64_t, std::map<std::string, float>> out;
  auto r = RecordReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return out;
  std::string rec;
  bool first = true;
  while (*(*r)->Next(&rec)) {
    tensorboard::Event e;
    EXPECT_TRUE(e.ParseFromString(rec));
    if (first) {
      EXPECT_EQ(e.file_version(), "brain.Event:2");
      first = false;
      continue;
    }
    for (const auto& v : e.summary().value()) out[e.step()][v.tag()] = v.simple_value();
  }
  return out;
}

TEST(TrainingSummariesTest, StepsEveryNAndEpochsInTrainAndValidation) {
  const fs::path dir = fs::temp_directory_path() / ("summaries_test." + std::to_string(getpid()));
  fs::remove_all(dir);
  auto s = TrainingSummaries::Create(dir.string(), 2);
  ASSERT_TRUE(s.ok()) << s.status();
  TrainingSummaries& t = **s;
  // Epoch 0: steps 1-3 (10, 30 and 20 examples); epoch 1: step 4.
  ASSERT_TRUE(t.Step(1, 1.0, 0.5, 0.1, 10, 100.0).ok());
  ASSERT_TRUE(t.Step(2, 0.5, 1.0, 0.1, 30, 102.0).ok());
  ASSERT_TRUE(t.Step(3, 0.25, 0.75, 0.05, 20, 103.0).ok());
  ASSERT_TRUE(t.Epoch(0, Scores{.loss = 0.7, .accuracy = 0.8}).ok());
  ASSERT_TRUE(t.Step(4, 2.0, 0.0, 0.01, 40, 107.0).ok());
  ASSERT_TRUE(t.Epoch(1, std::nullopt).ok());
  const std::string train_path = t.train().path(), validation_path = t.validation().path();
  ASSERT_TRUE(t.Close().ok());

  EXPECT_EQ(fs::path(train_path).parent_path(), dir / "train");
  EXPECT_EQ(fs::path(validation_path).parent_path(), dir / "validation");
  auto train = ReadRun(train_path);
  // Step 2: its batch; 30 examples in the 2 s since step 1 (whose own duration is unknown).
  ASSERT_TRUE(train.count(2));
  EXPECT_FLOAT_EQ(train[2]["batch_loss"], 0.5f);
  EXPECT_FLOAT_EQ(train[2]["batch_accuracy"], 1.0f);
  EXPECT_FLOAT_EQ(train[2]["learning_rate"], 0.1f);
  EXPECT_FLOAT_EQ(train[2]["samples_per_second"], 15.0f);
  // Step 4: steps 3 and 4, 60 examples in 5 s.
  EXPECT_FLOAT_EQ(train[4]["samples_per_second"], 12.0f);
  EXPECT_FALSE(train.count(3));  // not a multiple of 2
  // Epochs at x = epoch: 0 averages steps 1-3 by examples, 1 is step 4 alone.
  EXPECT_FLOAT_EQ(train[0]["epoch_loss"], (1.0f * 10 + 0.5f * 30 + 0.25f * 20) / 60);
  EXPECT_FLOAT_EQ(train[0]["epoch_accuracy"], (0.5f * 10 + 30 + 0.75f * 20) / 60);
  EXPECT_FLOAT_EQ(train[1]["epoch_loss"], 2.0f);
  auto validation = ReadRun(validation_path);
  ASSERT_EQ(validation.size(), 1u);  // epoch 1 had no evaluation
  EXPECT_FLOAT_EQ(validation[0]["epoch_loss"], 0.7f);
  EXPECT_FLOAT_EQ(validation[0]["epoch_accuracy"], 0.8f);
  fs::remove_all(dir);
}

// ParameterServer's global steps jump (several workers push): a step is recorded when the count
// reaches or passes the next multiple; a resumed run starts at the next multiple.
TEST(TrainingSummariesTest, StepsThatJumpAreRecordedAtEachMultiplePassed) {
  const fs::path dir = fs::temp_directory_path() / ("summaries_jump." + std::to_string(getpid()));
  fs::remove_all(dir);
  auto s = TrainingSummaries::Create(dir.string(), 4);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t step : {5, 6, 9, 10, 11, 13, 16, 17}) {
    ASSERT_TRUE((*s)->Step(step, 1.0, 0.5, 0.1, 8, static_cast<double>(step)).ok());
  }
  const std::string path = (*s)->train().path();
  ASSERT_TRUE((*s)->Close().ok());
  std::vector<int64_t> recorded;
  for (const auto& [step, tags] : ReadRun(path)) recorded.push_back(step);
  EXPECT_EQ(recorded, (std::vector<int64_t>{9, 13, 16}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lockstep::trainer
