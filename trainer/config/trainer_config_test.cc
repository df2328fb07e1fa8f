// Every enum of TrainerConfig against its spellings, written out here independently of the
// tables in trainer_config.cc: each name parses to its value and back, and nothing else parses.
#include "trainer/config/trainer_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace lockstep::trainer {
namespace {

using ::testing::HasSubstr;

template <typename E>
void ExpectRoundTrip(const std::vector<std::pair<E, std::string>>& want,
                     absl::StatusOr<E> (*parse)(const std::string&), std::string (*name)(E),
                     const std::string& bad, const std::string& listed) {
  for (const auto& [value, spelling] : want) {
    SCOPED_TRACE(spelling);
    EXPECT_EQ(name(value), spelling);
    absl::StatusOr<E> parsed = parse(spelling);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, value);
  }
  for (const std::string& s : {bad, std::string(), want.front().second + " "}) {
    absl::StatusOr<E> parsed = parse(s);
    ASSERT_FALSE(parsed.ok()) << s;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr("\"" + s + "\" is not one of " + listed));
  }
}

TEST(TrainerConfigTest, StrategiesRoundTrip) {
  ExpectRoundTrip<Strategy>({{Strategy::kOneDevice, "OneDevice"},
                             {Strategy::kMirrored, "Mirrored"},
                             {Strategy::kCentralStorage, "CentralStorage"},
                             {Strategy::kMultiWorkerMirrored, "MultiWorkerMirrored"},
                             {Strategy::kParameterServer, "ParameterServer"}},
                            ParseStrategy, StrategyName, "mirrored",
                            "OneDevice, Mirrored, CentralStorage, MultiWorkerMirrored, "
                            "ParameterServer");
}

TEST(TrainerConfigTest, DevicesAndPrecisionsRoundTrip) {
  ExpectRoundTrip<Device>({{Device::kAuto, "auto"}, {Device::kCpu, "cpu"}, {Device::kGpu, "gpu"}},
                          ParseDevice, DeviceName, "tpu", "auto, cpu, gpu");
  ExpectRoundTrip<Precision>({{Precision::kFloat32, "float32"},
                              {Precision::kMixedFloat16, "mixed_float16"},
                              {Precision::kMixedBfloat16, "mixed_bfloat16"}},
                             ParsePrecision, PrecisionName, "fp8",
                             "float32, mixed_float16, mixed_bfloat16");
}

TEST(TrainerConfigTest, CollectivesCrossDeviceOpsAndPsModesRoundTrip) {
  ExpectRoundTrip<CollectiveBackend>({{CollectiveBackend::kAuto, "auto"},
                                      {CollectiveBackend::kNccl, "nccl"},
                                      {CollectiveBackend::kRing, "ring"}},
                                     ParseCollectiveBackend, CollectiveBackendName, "mpi",
                                     "auto, nccl, ring");
  ExpectRoundTrip<CrossDeviceOps>({{CrossDeviceOps::kAllReduce, "all-reduce"},
                                   {CrossDeviceOps::kHierarchicalCopy, "hierarchical-copy"},
                                   {CrossDeviceOps::kReduceToOneDevice, "reduce-to-one-device"}},
                                  ParseCrossDeviceOps, CrossDeviceOpsName, "nccl",
                                  "all-reduce, hierarchical-copy, reduce-to-one-device");
  ExpectRoundTrip<PsMode>({{PsMode::kAsync, "async"}, {PsMode::kSync, "sync"}}, ParsePsMode,
                          PsModeName, "eventual", "async, sync");
}

TEST(TrainerConfigTest, VariablesOnHostAndTrainingTasks) {
  EXPECT_TRUE(VariablesOnHost(Strategy::kCentralStorage));
  EXPECT_TRUE(VariablesOnHost(Strategy::kParameterServer));
  EXPECT_FALSE(VariablesOnHost(Strategy::kMirrored));
  TrainerConfig c;
  EXPECT_EQ(TrainingTasks(c), 1);
  c.tf_config =
      TfConfig{.cluster = {{"chief", {"c:1"}}, {"worker", {"w:1", "w:2"}}, {"ps", {"p:1"}}}};
  EXPECT_EQ(TrainingTasks(c), 3);
}

}  // namespace
}  // namespace lockstep::trainer
