#include "trainer/config/trainer_config.h"

#include <span>
#include <string_view>
#include <utility>

namespace lockstep::trainer {
namespace {

// One table per enum, in declaration order: the only place a spelling is written.
template <typename E>
using Name = std::pair<E, std::string_view>;
template <typename E>
using Names = std::span<const Name<E>>;

constexpr Name<Strategy> kStrategies[] = {
    {Strategy::kOneDevice, "OneDevice"},
    {Strategy::kMirrored, "Mirrored"},
    {Strategy::kCentralStorage, "CentralStorage"},
    {Strategy::kMultiWorkerMirrored, "MultiWorkerMirrored"},
    {Strategy::kParameterServer, "ParameterServer"},
};
constexpr Name<Device> kDevices[] = {
    {Device::kAuto, "auto"}, {Device::kCpu, "cpu"}, {Device::kGpu, "gpu"}};
constexpr Name<Precision> kPrecisions[] = {{Precision::kFloat32, "float32"},
                                           {Precision::kMixedFloat16, "mixed_float16"},
                                           {Precision::kMixedBfloat16, "mixed_bfloat16"}};
constexpr Name<CollectiveBackend> kCollectives[] = {{CollectiveBackend::kAuto, "auto"},
                                                    {CollectiveBackend::kNccl, "nccl"},
                                                    {CollectiveBackend::kRing, "ring"}};
constexpr Name<CrossDeviceOps> kCrossDeviceOps[] = {
    {CrossDeviceOps::kAllReduce, "all-reduce"},
    {CrossDeviceOps::kHierarchicalCopy, "hierarchical-copy"},
    {CrossDeviceOps::kReduceToOneDevice, "reduce-to-one-device"}};
constexpr Name<PsMode> kPsModes[] = {{PsMode::kAsync, "async"}, {PsMode::kSync, "sync"}};

template <typename E>
absl::StatusOr<E> Parse(const std::string& s, Names<E> names) {
  std::string choices;
  for (const auto& [value, name] : names) {
    if (name == s) return value;
    if (!choices.empty()) choices += ", ";
    choices += name;
  }
  return absl::InvalidArgumentError("\"" + s + "\" is not one of " + choices);
}

template <typename E>
std::string NameOf(E v, Names<E> names) {
  for (const auto& [value, name] : names) {
    if (value == v) return std::string(name);
  }
  return "unknown";  // unreachable for a value of the enum
}

}  // namespace

absl::StatusOr<Strategy> ParseStrategy(const std::string& s) {
  return Parse<Strategy>(s, kStrategies);
}
std::string StrategyName(Strategy v) { return NameOf<Strategy>(v, kStrategies); }
absl::StatusOr<Device> ParseDevice(const std::string& s) { return Parse<Device>(s, kDevices); }
std::string DeviceName(Device v) { return NameOf<Device>(v, kDevices); }
absl::StatusOr<Precision> ParsePrecision(const std::string& s) {
  return Parse<Precision>(s, kPrecisions);
}
std::string PrecisionName(Precision v) { return NameOf<Precision>(v, kPrecisions); }
absl::StatusOr<CollectiveBackend> ParseCollectiveBackend(const std::string& s) {
  return Parse<CollectiveBackend>(s, kCollectives);
}
std::string CollectiveBackendName(CollectiveBackend v) {
  return NameOf<CollectiveBackend>(v, kCollectives);
}
absl::StatusOr<CrossDeviceOps> ParseCrossDeviceOps(const std::string& s) {
  return Parse<CrossDeviceOps>(s, kCrossDeviceOps);
}
std::string CrossDeviceOpsName(CrossDeviceOps v) {
  return NameOf<CrossDeviceOps>(v, kCrossDeviceOps);
}
absl::StatusOr<PsMode> ParsePsMode(const std::string& s) { return Parse<PsMode>(s, kPsModes); }
std::string PsModeName(PsMode v) { return NameOf<PsMode>(v, kPsModes); }

int TrainingTasks(const TrainerConfig& c) {
  if (!c.tf_config) return 1;
  return static_cast<int>(c.tf_config->Hosts("chief").size() + c.tf_config->Hosts("worker").size());
}

}  // namespace lockstep::trainer
