#include "operator/api/conditions.h"

namespace lockstep::api {

const Condition* FindCondition(const std::vector<Condition>& conditions, ConditionType type) {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool IsConditionTrue(const std::vector<Condition>& conditions, ConditionType type) {
  const Condition* c = FindCondition(conditions, type);
  return c != nullptr && c->status == ConditionStatus::kTrue;
}

bool SetCondition(std::vector<Condition>* conditions, ConditionType type, ConditionStatus status,
                  std::string reason, std::string message, int64_t observed_generation,
                  absl::Time now) {
  for (Condition& c : *conditions) {
    if (c.type != type) continue;
    Condition updated = c;
    if (c.status != status) updated.last_transition_time = now;
    updated.status = status;
    updated.reason = std::move(reason);
    updated.message = std::move(message);
    updated.observed_generation = observed_generation;
    if (updated == c) return false;
    c = std::move(updated);
    return true;
  }
  conditions->push_back(
      {type, status, std::move(reason), std::move(message), now, observed_generation});
  return true;
}

}  // namespace lockstep::api
