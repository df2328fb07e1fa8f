// The collective choice as a table: requested backend x placement x NCCL in the build ->
// the chosen candidate and the reasons of those skipped, or the BadConfig error; then what
// happens when the chosen candidate finds at connection time that it cannot serve the group
// (fake candidates), and NCCL's one-GPU-per-rank rule. No sockets, no GPUs.
#include "trainer/strategy/collective_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep::trainer {
namespace {

using ::testing::HasSubstr;

constexpr Placement kCpu{.gpu = false, .gpus = 0};
constexpr Placement kGpus{.gpu = true, .gpus = 2};

TEST(CollectiveChoiceTest, CandidatesInOrderOfPreference) {
  std::vector<CollectiveCandidate> c = MultiWorkerCollectives(true);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].backend, CollectiveBackend::kNccl);
  EXPECT_EQ(c[1].backend, CollectiveBackend::kRing);
}

TEST(CollectiveChoiceTest, Table) {
  struct Row {
    CollectiveBackend requested;
    Placement placement;
    bool nccl_built;
    std::string want;  // chosen backend, or "" for an error
    std::string describe_or_error;
  };
  using B = CollectiveBackend;
  for (const Row& row : std::vector<Row>{
           {B::kAuto, kGpus, true, "nccl", "nccl (NCCL (GPU replicas))"},
           {B::kAuto, kCpu, true, "ring",
            "ring (ring all-reduce over TCP); skipped nccl: the replicas run on the CPU"},
           {B::kAuto, kGpus, false, "ring",
            "ring (ring all-reduce over TCP); skipped nccl: this build has no NCCL"},
           {B::kAuto, kCpu, false, "ring",
            "ring (ring all-reduce over TCP); skipped nccl: the replicas run on the CPU"},
           {B::kRing, kGpus, true, "ring", "ring (ring all-reduce over TCP)"},
           {B::kRing, kCpu, false, "ring", "ring (ring all-reduce over TCP)"},
           {B::kNccl, kGpus, true, "nccl", "nccl (NCCL (GPU replicas))"},
           {B::kNccl, kCpu, true, "", "--collective nccl: the replicas run on the CPU"},
           {B::kNccl, kGpus, false, "", "--collective nccl: this build has no NCCL"},
       }) {
    SCOPED_TRACE(CollectiveBackendName(row.requested) + (row.placement.gpu ? " gpu" : " cpu") +
                 (row.nccl_built ? " nccl-built" : " no-nccl"));
    const std::vector<CollectiveCandidate> candidates = MultiWorkerCollectives(row.nccl_built);
    absl::StatusOr<CollectiveChoice> got =
        ChooseCollective(candidates, row.requested, row.placement);
    if (row.want.empty()) {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);  // BadConfig
      EXPECT_EQ(got.status().message(), row.describe_or_error);
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_NE(got->chosen, nullptr);
    EXPECT_EQ(CollectiveBackendName(got->chosen->backend), row.want);
    EXPECT_EQ(got->Describe(), row.describe_or_error);
  }
}

TEST(CollectiveChoiceTest, NoEnabledCandidateAndAnUnknownRequestAreBadConfig) {
  auto never = [](const std::string& why) {
    return [why](const Placement&) { return absl::FailedPreconditionError(why); };
  };
  std::vector<CollectiveCandidate> candidates = {
      {.backend = CollectiveBackend::kNccl, .description = "n", .enabled = never("no GPU")},
      {.backend = CollectiveBackend::kRing, .description = "r", .enabled = never("no network")},
  };
  absl::StatusOr<CollectiveChoice> none =
      ChooseCollective(candidates, CollectiveBackend::kAuto, kCpu);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("skipped nccl: no GPU, ring: no network"));

  candidates.pop_back();
  absl::StatusOr<CollectiveChoice> missing =
      ChooseCollective(candidates, CollectiveBackend::kRing, kCpu);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--collective ring"));
}

TEST(CollectiveChoiceTest, OneGpuPerRank) {
  struct Row {
    std::vector<std::string> gpus;
    std::string error;  // "" for OK
  };
  for (const Row& row : std::vector<Row>{
           {{}, ""},
           {{"GPU-a"}, ""},
           {{"GPU-a", "GPU-b", "GPU-c"}, ""},
           {{"", ""}, ""},  // unknown GPUs are not compared
           {{"GPU-a", "GPU-a"}, "ranks 0 and 1 share GPU GPU-a"},
           {{"GPU-a", "", "GPU-b", "GPU-a", "GPU-b"}, "ranks 0 and 3 share GPU GPU-a"},
       }) {
    const absl::Status s = OneGpuPerRank(row.gpus);
    if (row.error.empty()) {
      EXPECT_TRUE(s.ok()) << s;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);  // BadConfig: a retry cannot help
    EXPECT_THAT(std::string(s.message()), HasSubstr(row.error));
    EXPECT_THAT(std::string(s.message()), HasSubstr("NCCL takes one GPU per rank"));
  }
}

// Fake candidates whose connect answers what each case scripts, counting the calls.
class ConnectChosenTest : public ::testing::Test {
 protected:
  using Answer = absl::StatusOr<std::unique_ptr<comm::Collective>>;
  void SetUp() override {
    auto always = [](const Placement&) { return absl::OkStatus(); };
    candidates_ = {
        {.backend = CollectiveBackend::kNccl,
         .description = "n",
         .enabled = always,
         .connect = [this](const CollectiveSetup&) -> Answer {
           ++nccl_calls_;
           return nccl_answer_;
         }},
        {.backend = CollectiveBackend::kRing,
         .description = "r",
         .enabled = always,
         .connect = [this](const CollectiveSetup&) -> Answer {
           ++ring_calls_;
           return std::unique_ptr<comm::Collective>();
         }},
    };
  }
  CollectiveChoice Chosen(CollectiveBackend requested) {
    absl::StatusOr<CollectiveChoice> c = ChooseCollective(candidates_, requested, kGpus);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }

  std::vector<CollectiveCandidate> candidates_;
  absl::Status nccl_answer_;
  int nccl_calls_ = 0;
  int ring_calls_ = 0;
};

TEST_F(ConnectChosenTest, AutoFallsBackWhenTheGroupCannotBeServed) {
  nccl_answer_ = absl::InvalidArgumentError("ranks 0 and 1 share GPU GPU-a");
  CollectiveChoice choice = Chosen(CollectiveBackend::kAuto);
  EXPECT_TRUE(ConnectChosen(candidates_, CollectiveBackend::kAuto, kGpus, {}, &choice).ok());
  EXPECT_EQ(nccl_calls_, 1);
  EXPECT_EQ(ring_calls_, 1);
  ASSERT_NE(choice.chosen, nullptr);
  EXPECT_EQ(choice.chosen->backend, CollectiveBackend::kRing);
  EXPECT_EQ(choice.Describe(), "ring (r); skipped nccl: ranks 0 and 1 share GPU GPU-a");
}

TEST_F(ConnectChosenTest, ANamedBackendThatCannotServeIsBadConfig) {
  nccl_answer_ = absl::InvalidArgumentError("ranks 0 and 1 share GPU GPU-a");
  CollectiveChoice choice = Chosen(CollectiveBackend::kNccl);
  auto got = ConnectChosen(candidates_, CollectiveBackend::kNccl, kGpus, {}, &choice);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ring_calls_, 0);
  EXPECT_EQ(choice.chosen->backend, CollectiveBackend::kNccl);
}

TEST_F(ConnectChosenTest, ALostPeerIsNotAFallback) {
  nccl_answer_ = absl::AbortedError("peer lost: the chief is gone");
  CollectiveChoice choice = Chosen(CollectiveBackend::kAuto);
  auto got = ConnectChosen(candidates_, CollectiveBackend::kAuto, kGpus, {}, &choice);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted);  // retried by the restart policy
  EXPECT_EQ(ring_calls_, 0);
  EXPECT_EQ(choice.chosen->backend, CollectiveBackend::kNccl);
}

TEST_F(ConnectChosenTest, NoCandidateLeftIsBadConfig) {
  nccl_answer_ = absl::InvalidArgumentError("ranks 0 and 1 share GPU GPU-a");
  candidates_.pop_back();
  CollectiveChoice choice = Chosen(CollectiveBackend::kAuto);
  auto got = ConnectChosen(candidates_, CollectiveBackend::kAuto, kGpus, {}, &choice);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("share GPU GPU-a"));
}

}  // namespace
}  // namespace lockstep::trainer
