#pragma once
// The parts of the status computation that read pods: replica statuses, the Ready column,
// whether a pod counts as running, why a pod is pending, the progress summary.
// Thread-safety: pure functions.

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "operator/api/trainingjob_types.h"
#include "operator/trainingjob/observed.h"

namespace lockstep::trainingjob {

struct ReplicaPod {
  api::ReplicaType type;
  int32_t index;
  std::shared_ptr<const ObservedPod> pod;
};

// Per replica type of the spec: active (Pending or Running), ready, succeeded (completed
// indexes), failed, restarts (kept from `previous`), selector and completedIndexes.
std::map<api::ReplicaType, api::ReplicaStatus> ReplicaStatuses(
    const api::TrainingJobSpec& spec, const std::vector<ReplicaPod>& pods,
    const std::map<api::ReplicaType, std::set<int32_t>>& completed,
    const std::map<api::ReplicaType, api::ReplicaStatus>& previous, std::string_view job_name);

// "ready/replicas" over every replica type: the Ready printer column.
std::string ReadyString(const api::TrainingJobSpec& spec,
                        const std::map<api::ReplicaType, api::ReplicaStatus>& statuses);

// Running phase with every container running (a container waiting to be restarted in place
// does not count).
bool PodRunning(const ObservedPod& pod);

// ": ErrImagePull: image x not found" from the first waiting container, or "".
std::string PendingDetail(const ObservedPod& pod);

// "45% (450/1000)" with a total, "step 450" without.
std::string ProgressSummary(const api::Progress& p);

}  // namespace lockstep::trainingjob
