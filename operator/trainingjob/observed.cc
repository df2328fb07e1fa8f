#include "operator/trainingjob/observed.h"

#include <array>
#include <utility>

#include "operator/api/object_meta.h"

namespace lockstep::trainingjob {
namespace {

constexpr std::array<std::pair<PodPhase, std::string_view>, 5> kPhases = {{
    {PodPhase::kUnknown, "Unknown"},
    {PodPhase::kPending, "Pending"},
    {PodPhase::kRunning, "Running"},
    {PodPhase::kSucceeded, "Succeeded"},
    {PodPhase::kFailed, "Failed"},
}};

}  // namespace

std::string_view ChildKindPlural(ChildKind kind) {
  switch (kind) {
    case ChildKind::kPod:
      return "pods";
    case ChildKind::kService:
      return "services";
    case ChildKind::kSecret:
      return "secrets";
    case ChildKind::kPodGroup:
      return "podgroups";
    case ChildKind::kTrainingJob:
      return "trainingjobs";
  }
  return "";
}

PodPhase ParsePodPhase(std::string_view phase) {
  for (const auto& [value, name] : kPhases) {
    if (name == phase) return value;
  }
  return PodPhase::kUnknown;
}

std::string_view PodPhaseName(PodPhase phase) {
  for (const auto& [value, name] : kPhases) {
    if (value == phase) return name;
  }
  return "Unknown";
}

std::string KeyOf(const ChildMeta& m) { return api::ObjectKey(m.namespace_, m.name); }

std::vector<std::string> OwnerUids(const ChildMeta& m) {
  if (m.controller_uid.empty()) return {};
  return {m.controller_uid};
}

}  // namespace lockstep::trainingjob
