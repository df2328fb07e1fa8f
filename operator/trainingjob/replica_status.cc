#include "operator/trainingjob/replica_status.h"

#include <charconv>

#include "absl/strings/str_split.h"
#include "common/str_util.h"
#include "operator/trainingjob/labels.h"
#include "operator/trainingjob/planner.h"

namespace lockstep::trainingjob {

std::set<int32_t> ParseIndexes(std::string_view s) {
  std::set<int32_t> out;
  auto parse = [](std::string_view v, int32_t* x) {
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *x);
    return ec == std::errc() && end == v.data() + v.size() && *x >= 0;
  };
  for (absl::string_view part : absl::StrSplit(absl::string_view(s.data(), s.size()), ',')) {
    std::string_view p(part.data(), part.size());
    if (p.empty()) continue;
    size_t dash = p.find('-');
    int32_t lo = 0;
    int32_t hi = 0;
    if (dash == std::string_view::npos) {
      if (parse(p, &lo)) out.insert(lo);
    } else if (parse(p.substr(0, dash), &lo) && parse(p.substr(dash + 1), &hi) && lo <= hi &&
               hi - lo < 100000) {
      for (int32_t i = lo; i <= hi; ++i) out.insert(i);
    }
  }
  return out;
}

std::string FormatIndexes(const std::set<int32_t>& indexes) {
  std::string out;
  for (auto it = indexes.begin(); it != indexes.end();) {
    int32_t lo = *it;
    int32_t hi = lo;
    for (++it; it != indexes.end() && *it == hi + 1; ++it) hi = *it;
    if (!out.empty()) out += ",";
    out += lo == hi ? std::to_string(lo) : StrCat(lo, "-", hi);
  }
  return out;
}

std::map<api::ReplicaType, api::ReplicaStatus> ReplicaStatuses(
    const api::TrainingJobSpec& spec, const std::vector<ReplicaPod>& pods,
    const std::map<api::ReplicaType, std::set<int32_t>>& completed,
    const std::map<api::ReplicaType, api::ReplicaStatus>& previous, std::string_view job_name) {
  std::map<api::ReplicaType, api::ReplicaStatus> out;
  for (const auto& [type, rs] : spec.replica_specs) {
    api::ReplicaStatus& st = out[type];
    if (auto it = previous.find(type); it != previous.end()) st.restarts = it->second.restarts;
    st.selector = ReplicaSelector(job_name, type);
    if (auto it = completed.find(type); it != completed.end()) {
      st.succeeded = static_cast<int32_t>(it->second.size());
      st.completed_indexes = FormatIndexes(it->second);
    }
  }
  for (const ReplicaPod& rp : pods) {
    auto it = out.find(rp.type);
    if (it == out.end()) continue;
    const ObservedPod& pod = *rp.pod;
    if (pod.phase == PodPhase::kPending || pod.phase == PodPhase::kRunning) it->second.active += 1;
    if (pod.phase == PodPhase::kFailed) it->second.failed += 1;
    if (pod.ready && pod.phase == PodPhase::kRunning) {
      it->second.ready += 1;
    }
  }
  return out;
}

std::string ReadyString(const api::TrainingJobSpec& spec,
                        const std::map<api::ReplicaType, api::ReplicaStatus>& statuses) {
  int32_t ready = 0;
  int32_t total = 0;
  for (const auto& [type, rs] : spec.replica_specs) total += rs.replicas;
  for (const auto& [type, st] : statuses) ready += st.ready;
  return StrCat(ready, "/", total);
}

bool PodRunning(const ObservedPod& pod) {
  return pod.phase == PodPhase::kRunning && pod.containers_running;
}

std::string PendingDetail(const ObservedPod& pod) {
  const PodDetail& why = pod.why();
  if (!why.waiting.reason.empty()) {
    return StrCat(": ", why.waiting.reason, why.waiting.message.empty() ? "" : ": ",
                  why.waiting.message);
  }
  if (pod.unschedulable) return StrCat(": unschedulable: ", why.unschedulable_message);
  return "";
}

std::string ProgressSummary(const api::Progress& p) {
  if (p.total_steps && *p.total_steps > 0) {
    int64_t pct = std::min<int64_t>(100, p.step * 100 / *p.total_steps);
    return StrCat(pct, "% (", p.step, "/", *p.total_steps, ")");
  }
  return StrCat("step ", p.step);
}

}  // namespace lockstep::trainingjob
