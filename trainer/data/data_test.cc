#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "trainer/data/batcher.h"
#include "trainer/data/dataset.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

TEST(FashionMnistTest, LoadsTheDebianFiles) {
  if (!fs::exists(kDefaultFashionMnistDir)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  absl::StatusOr<Dataset> test = LoadFashionMnist(kDefaultFashionMnistDir, "t10k");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->inputs[0].shape(), (Shape{10000, 1, 28, 28}));
  std::vector<int> counts(10);
  for (int32_t l : ClassIds(test->targets[0])) counts[static_cast<size_t>(l)] += 1;
  for (int c : counts) EXPECT_EQ(c, 1000);  // the test set is balanced
  double mean = 0;
  for (float v : test->inputs[0].values()) mean += v;
  EXPECT_NEAR(mean / static_cast<double>(test->inputs[0].size()), 0.0, 0.05);  // standardised
}

class BadFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lockstep_data_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  static std::string Header(uint32_t magic, std::vector<uint32_t> dims) {
    std::string s;
    for (uint32_t v : std::vector<uint32_t>{magic}) {
      for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>(v >> (8 * i)));
    }
    for (uint32_t v : dims) {
      for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>(v >> (8 * i)));
    }
    return s;
  }
  fs::path dir_;
};

TEST_F(BadFilesTest, MissingTruncatedAndMislabelledFilesAreNamed) {
  absl::StatusOr<Dataset> d = LoadFashionMnist(dir_.string(), "train");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("train-images-idx3-ubyte"), std::string::npos);

  Write("train-images-idx3-ubyte", Header(0x803, {2, 28, 28}) + std::string(784, '\0'));
  Write("train-labels-idx1-ubyte", Header(0x801, {2}) + std::string(2, '\0'));
  d = LoadFashionMnist(dir_.string(), "train");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos);

  Write("train-images-idx3-ubyte", Header(0x803, {2, 28, 28}) + std::string(2 * 784, '\0'));
  Write("train-labels-idx1-ubyte", Header(0x801, {2}) + std::string("\x01\x0c", 2));
  d = LoadFashionMnist(dir_.string(), "train");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("label 12"), std::string::npos);

  Write("train-labels-idx1-ubyte", Header(0x999, {2}) + std::string(2, '\0'));
  d = LoadFashionMnist(dir_.string(), "train");
  EXPECT_NE(d.status().message().find("bad magic"), std::string::npos);
}

TEST(BatcherTest, ShardsPartitionEachGlobalBatchAndEpochsReshuffle) {
  Dataset d = SyntheticDataset(40, 1);
  for (int64_t i = 0; i < 40; ++i) d.targets[0][i] = static_cast<float>(i);
  Batcher whole(&d, {.global_batch = 8, .seed = 5});
  Batcher a(&d, {.global_batch = 8, .shard_index = 0, .shard_count = 2, .seed = 5});
  Batcher b(&d,
            {.global_batch = 8, .shard_index = 1, .shard_count = 2, .seed = 5, .prefetch = false});
  EXPECT_EQ(whole.steps_per_epoch(), 5);
  std::set<int32_t> epoch0;
  std::vector<int32_t> first_epoch_order;
  for (int step = 0; step < 5; ++step) {
    Batch w = whole.Next(), x = a.Next(), y = b.Next();
    const std::vector<int32_t> wl = ClassIds(w.targets[0]), yl = ClassIds(y.targets[0]);
    std::vector<int32_t> joined = ClassIds(x.targets[0]);
    joined.insert(joined.end(), yl.begin(), yl.end());
    EXPECT_EQ(joined, wl) << step;
    epoch0.insert(wl.begin(), wl.end());
    first_epoch_order.insert(first_epoch_order.end(), wl.begin(), wl.end());
  }
  EXPECT_EQ(epoch0.size(), 40u);  // every example once
  Batch next = whole.Next();
  EXPECT_EQ(next.epoch, 1);
  EXPECT_EQ(next.step, 0);
  EXPECT_NE(std::vector<int32_t>(first_epoch_order.begin(), first_epoch_order.begin() + 8),
            ClassIds(next.targets[0]));
}

TEST(BatcherTest, StartingAtAPositionContinuesTheSameSequence) {
  Dataset d = SyntheticDataset(50, 2);
  Batcher from_start(&d, {.global_batch = 10, .seed = 9});
  for (int i = 0; i < 7; ++i) from_start.Next();
  Batcher resumed(&d, {.global_batch = 10, .seed = 9}, 1, 2);  // 7 = 1 * 5 + 2
  for (int i = 0; i < 4; ++i) {
    Batch x = from_start.Next(), y = resumed.Next();
    EXPECT_EQ(ClassIds(x.targets[0]), ClassIds(y.targets[0]));
    EXPECT_EQ(x.inputs[0], y.inputs[0]);
    EXPECT_EQ(x.epoch, y.epoch);
  }
}

}  // namespace
}  // namespace lockstep::trainer

namespace lockstep::trainer {
namespace {

// 500 classes of 64x64x3 images (6 M prototype values) draw only the prototypes of the classes
// their examples have: repeatable, each example its class's prototype (at half scale) plus unit
// noise, so two examples of one class lie sqrt(2) apart (root mean square) and two of different
// classes sqrt(2.5).
TEST(SyntheticDatasetTest, ManyLargeClassesDrawTheirPrototypesWhenUsed) {
  const Shape image{64, 64, 3};
  const int64_t size = 64 * 64 * 3, n = 120;
  Dataset d = SyntheticDataset(n, 3, 0, image, 500);
  ASSERT_EQ(d.inputs[0].shape(), Shape({n, 64, 64, 3}));
  EXPECT_EQ(SyntheticDataset(n, 3, 0, image, 500).inputs[0], d.inputs[0]);
  EXPECT_NE(SyntheticDataset(n, 3, 1, image, 500).inputs[0], d.inputs[0]);
  const std::vector<int32_t> label = ClassIds(d.targets[0]);
  auto distance = [&](int64_t a, int64_t b) {
    double sum = 0;
    for (int64_t j = 0; j < size; ++j) {
      const double diff = d.inputs[0][a * size + j] - d.inputs[0][b * size + j];
      sum += diff * diff;
    }
    return std::sqrt(sum / static_cast<double>(size));
  };
  int same = 0, different = 0;
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = a + 1; b < n; ++b) {
      const double dist = distance(a, b);
      if (label[static_cast<size_t>(a)] == label[static_cast<size_t>(b)]) {
        EXPECT_NEAR(dist, std::sqrt(2.0), 0.05) << a << " " << b;
        ++same;
      } else {
        EXPECT_NEAR(dist, std::sqrt(2.5), 0.05) << a << " " << b;
        ++different;
      }
    }
  }
  EXPECT_GT(same, 0);
  EXPECT_GT(different, 6000);
}

TEST(SyntheticTokensTest, IdsInRangePaddedAtTheEndAndRepeatable) {
  Dataset d = SyntheticTokens(200, 4, 0, {12}, 3, 50);
  ASSERT_EQ(d.inputs[0].shape(), Shape({200, 12}));
  int padded = 0;
  for (int64_t i = 0; i < 200; ++i) {
    bool seen_pad = false;
    for (int64_t j = 0; j < 12; ++j) {
      const float v = d.inputs[0][i * 12 + j];
      EXPECT_EQ(v, std::floor(v));
      EXPECT_GE(v, 0.0f);
      EXPECT_LT(v, 50.0f);
      if (v == 0.0f) seen_pad = true;
      if (seen_pad) {
        EXPECT_EQ(v, 0.0f) << "padding is a tail";
      }
    }
    padded += seen_pad;
    EXPECT_LT(ClassIds(d.targets[0])[static_cast<size_t>(i)], 3);
  }
  EXPECT_GT(padded, 50);
  EXPECT_EQ(SyntheticTokens(200, 4, 0, {12}, 3, 50).inputs[0], d.inputs[0]);
  EXPECT_NE(SyntheticTokens(200, 4, 1, {12}, 3, 50).inputs[0], d.inputs[0]);
}

}  // namespace
}  // namespace lockstep::trainer
