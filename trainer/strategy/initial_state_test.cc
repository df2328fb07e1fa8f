// The start of a synchronous run: the typed header on the wire, and the chief's checkpoint
// reaching every replica (or its restore failure ending every replica) over an in-process
// group.
#include "trainer/strategy/initial_state.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <thread>

#include "trainer/comm/in_process.h"
#include "trainer/strategy/data_parallel.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;
using Source = InitialStateHeader::Source;

TEST(InitialStateHeaderTest, RoundTripsEverySourceAndStepsPastFloatPrecision) {
  for (Source source :
       {Source::kFresh, Source::kCheckpoint, Source::kRestoreFailed, Source::kHeld}) {
    // 2^24 + 1 is the first integer a float cannot hold.
    const InitialStateHeader h{
        .source = source,
        .at = {.step = (int64_t{1} << 24) + 1, .epoch = int64_t{1} << 40, .epoch_step = 12345}};
    absl::StatusOr<InitialStateHeader> back = DecodeHeader(EncodeHeader(h));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->source, source);
    EXPECT_EQ(back->at.step, h.at.step);
    EXPECT_EQ(back->at.epoch, h.at.epoch);
    EXPECT_EQ(back->at.epoch_step, h.at.epoch_step);
  }
}

TEST(InitialStateHeaderTest, AnotherFormatIsRefused) {
  // The 4-float header of earlier trainers: {resumed, step, epoch, epoch_step} as floats.
  EncodedHeader old{1.0f, 40.0f, 1.0f, 8.0f, 0, 0, 0, 0};
  absl::StatusOr<InitialStateHeader> got = DecodeHeader(old);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("format version"), std::string::npos) << got.status();
}

class SyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lockstep-initial-state-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    c_.device = Device::kCpu;
    c_.dataset = "synthetic";
    c_.synthetic_size = 512;
    c_.batch_size = 32;
    c_.steps = 5;
    c_.optimizer = "adam";
    c_.checkpoint_dir = dir_.string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // SyncInitialState on `n` in-process replicas, each with a fresh engine built from `c`.
  std::vector<absl::StatusOr<InitialState>> Sync(const TrainerConfig& c, int n,
                                                 std::vector<std::unique_ptr<Engine>>* engines) {
    auto group = comm::InProcessGroup::Create(n, absl::Seconds(60));
    std::vector<std::unique_ptr<comm::Collective>> members;
    for (int i = 0; i < n; ++i) members.push_back(group->Member(i));
    engines->resize(n);
    for (int i = 0; i < n; ++i) {
      (*engines)[i] = std::move(*MakeEngine(c, {}, 0, members[i].get()));
    }
    std::vector<absl::StatusOr<InitialState>> out(n, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        out[i] = SyncInitialState(c, *(*engines)[i], members[i].get(), absl::Seconds(60));
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  fs::path dir_;
  TrainerConfig c_;
};

TEST_F(SyncTest, EveryReplicaStartsFromTheChiefsCheckpoint) {
  absl::StatusOr<Datasets> data = LoadDatasets(c_);
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(RunReplica(c_, *data, {.evaluate = false}).ok());
  std::vector<std::string> skipped;
  absl::StatusOr<std::optional<CheckpointState>> ck = LoadLatestCheckpoint(dir_.string(), &skipped);
  ASSERT_TRUE(ck.ok() && ck->has_value());

  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<absl::StatusOr<InitialState>> got = Sync(c_, 3, &engines);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    EXPECT_TRUE(got[i]->resumed);
    EXPECT_EQ(got[i]->at.step, 5);
    std::vector<Tensor*> params = engines[i]->model().Params();
    ASSERT_EQ(params.size(), (*ck)->params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      EXPECT_EQ(params[p]->values(), (*ck)->params[p].values()) << "rank " << i << " param " << p;
    }
    std::vector<Tensor*> state = engines[i]->optimizer().State();
    ASSERT_EQ(state.size(), (*ck)->optimizer_state.size());
    for (size_t s = 0; s < state.size(); ++s) {
      EXPECT_EQ(state[s]->values(), (*ck)->optimizer_state[s].values()) << "rank " << i;
    }
  }
}

TEST_F(SyncTest, AFreshStartIsNotAResume) {
  std::vector<std::unique_ptr<Engine>> engines;
  for (const auto& r : Sync(c_, 2, &engines)) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->resumed);
    EXPECT_EQ(r->at.step, 0);
  }
}

TEST_F(SyncTest, AChiefThatCannotRestoreEndsEveryReplica) {
  absl::StatusOr<Datasets> data = LoadDatasets(c_);
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(RunReplica(c_, *data, {.evaluate = false}).ok());
  TrainerConfig other = c_;
  other.optimizer = "sgd";  // the checkpoint is adam's
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<absl::StatusOr<InitialState>> got = Sync(other, 2, &engines);
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kInvalidArgument) << got[0].status();
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kFailedPrecondition) << got[1].status();
}

// In-place recovery: the re-formed group takes over the state of the member furthest along,
// bit for bit (weights and optimizer slots), and its position; a replacement holds nothing.
TEST_F(SyncTest, ARegroupTakesOverTheStateOfTheMemberFurthestAlong) {
  const int n = 3;
  std::vector<std::unique_ptr<Engine>> engines;
  std::mt19937 rng(7);
  std::normal_distribution<float> noise;
  for (int i = 0; i < n; ++i) {
    engines.push_back(std::move(*MakeEngine(c_, {}, 0, nullptr)));
    if (i == 2) continue;  // the replacement: the seed's weights, empty slots
    std::vector<Tensor*> all = engines[i]->model().Params();
    for (Tensor* t : engines[i]->optimizer().State()) all.push_back(t);
    for (Tensor* t : all) {
      for (int64_t k = 0; k < t->size(); ++k) t->data()[k] = noise(rng);
    }
  }
  std::vector<Tensor*> want = engines[1]->model().Params();
  for (Tensor* t : engines[1]->optimizer().State()) want.push_back(t);
  const std::vector<float> expected = PackTensors(want);
  const std::vector<std::optional<Position>> held = {
      Position{.step = 40, .epoch = 1, .epoch_step = 8},
      Position{.step = 41, .epoch = 1, .epoch_step = 9}, std::nullopt};

  auto group = comm::InProcessGroup::Create(n, absl::Seconds(60));
  std::vector<std::unique_ptr<comm::Collective>> members;
  for (int i = 0; i < n; ++i) members.push_back(group->Member(i));
  std::vector<absl::StatusOr<RecoveredState>> out(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ASSERT_TRUE(engines[i]->Rebind(members[i].get()).ok());
      out[i] = SyncRecoveredState(*engines[i], members[i].get(), held[i], absl::Seconds(60));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(out[i].ok()) << out[i].status();
    EXPECT_EQ(out[i]->source, 1);
    EXPECT_EQ(out[i]->at.step, 41);
    EXPECT_EQ(out[i]->at.epoch_step, 9);
    std::vector<Tensor*> got = engines[i]->model().Params();
    for (Tensor* t : engines[i]->optimizer().State()) got.push_back(t);
    EXPECT_EQ(PackTensors(got), expected) << "rank " << i;
  }
}

TEST_F(SyncTest, ARegroupWhereNobodyHoldsTheStateIsRefused) {
  auto group = comm::InProcessGroup::Create(2, absl::Seconds(60));
  std::vector<std::unique_ptr<comm::Collective>> members;
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < 2; ++i) {
    members.push_back(group->Member(i));
    engines.push_back(std::move(*MakeEngine(c_, {}, 0, members[i].get())));
  }
  std::vector<absl::StatusOr<RecoveredState>> out(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      out[i] = SyncRecoveredState(*engines[i], members[i].get(), std::nullopt, absl::Seconds(60));
    });
  }
  for (auto& t : threads) t.join();
  for (auto& r : out) EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lockstep::trainer
