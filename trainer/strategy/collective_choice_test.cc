// The collective choice as a table: requested backend x placement x NCCL in the build ->
// the chosen candidate and the reasons of those skipped, or the BadConfig error. No sockets,
// no GPUs: the candidates' connect functions are never called.
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

}  // namespace
}  // namespace lockstep::trainer
