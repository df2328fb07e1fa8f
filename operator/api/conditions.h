#pragma once
// Condition helpers in the metav1.Condition style: one condition per type; setting a condition
// to the status it already has keeps its lastTransitionTime (only reason, message and
// observedGeneration are refreshed). Thread-safety: pure functions over values.

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/trainingjob_types.h"

namespace lockstep::api {

const Condition* FindCondition(const std::vector<Condition>& conditions, ConditionType type);
bool IsConditionTrue(const std::vector<Condition>& conditions, ConditionType type);

// Sets `c` (whose last_transition_time is ignored) at time `now`. Returns true when anything
// changed. New conditions are appended, so the list keeps the order types first appeared in.
bool SetCondition(std::vector<Condition>* conditions, ConditionType type, ConditionStatus status,
                  std::string reason, std::string message, int64_t observed_generation,
                  absl::Time now);

}  // namespace lockstep::api
