#include "operator/trainingjob/observed.h"

#include <array>
#include <cstring>
#include <utility>

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

ChildMeta::Chars& ChildMeta::Chars::operator=(const Chars& o) {
  if (this == &o) return *this;
  const uint32_t size = o.ends[5];  // the parts are contiguous: the last ends them all
  std::unique_ptr<char[]> copy = size == 0 ? nullptr : std::make_unique_for_overwrite<char[]>(size);
  if (size != 0) std::memcpy(copy.get(), o.bytes.get(), size);
  bytes = std::move(copy);
  ends = o.ends;
  return *this;
}

ChildMeta::Strings ChildMeta::strings() const {
  return {.namespace_ = namespace_(),
          .name = name(),
          .uid = uid(),
          .resource_version = resource_version(),
          .controller_uid = controller_uid(),
          .controller_job = controller_job()};
}

void ChildMeta::Set(const Strings& s) {
  // `s` may view this object's own characters: the new ones are built before the old go.
  const size_t slash = s.namespace_.empty() ? 0 : 1;
  const size_t size = s.namespace_.size() + slash + s.name.size() + s.uid.size() +
                      s.resource_version.size() + s.controller_uid.size() + s.controller_job.size();
  std::unique_ptr<char[]> chars =
      size == 0 ? nullptr : std::make_unique_for_overwrite<char[]>(size);
  std::array<uint32_t, 6> ends{};
  size_t at = 0;
  auto put = [&](std::string_view part, size_t end_index) {
    if (!part.empty()) std::memcpy(chars.get() + at, part.data(), part.size());
    at += part.size();
    ends[end_index] = static_cast<uint32_t>(at);
  };
  put(s.namespace_, 0);
  if (slash != 0) chars[at++] = '/';
  put(s.name, 1);
  put(s.uid, 2);
  put(s.resource_version, 3);
  put(s.controller_uid, 4);
  put(s.controller_job, 5);
  chars_.bytes = std::move(chars);
  chars_.ends = ends;
}

std::string KeyOf(const ChildMeta& m) { return std::string(m.key()); }

std::vector<std::string> OwnerUids(const ChildMeta& m) {
  if (m.controller_uid().empty()) return {};
  return {std::string(m.controller_uid())};
}

const PodDetail& ObservedPod::why() const {
  static const PodDetail kNone;
  return detail ? *detail : kNone;
}

PodDetail& ObservedPod::mutable_detail() {
  if (!detail || detail.use_count() > 1) {
    detail = std::make_shared<PodDetail>(detail ? *detail : PodDetail{});
  }
  // Every detail is made just above as a non-const PodDetail, and this pod now holds the only
  // reference: changing it changes no other pod.
  return const_cast<PodDetail&>(*detail);
}

}  // namespace lockstep::trainingjob
