#include "operator/api/trainingjob_types.h"

namespace lockstep::api {

std::string_view ReplicaTypeLower(ReplicaType t) {
  switch (t) {
    case ReplicaType::kChief:
      return "chief";
    case ReplicaType::kEvaluator:
      return "evaluator";
    case ReplicaType::kPS:
      return "ps";
    case ReplicaType::kWorker:
      return "worker";
  }
  return "unknown";
}

std::string_view ReplicaTypeLower(const TrainingJob& job, ReplicaType t) {
  if (t == ReplicaType::kChief && job.tfjob && job.tfjob->master) return "master";
  return ReplicaTypeLower(t);
}

std::string_view ReplicaTypeName(const TrainingJob& job, ReplicaType t) {
  if (t == ReplicaType::kChief && job.tfjob && job.tfjob->master) return "Master";
  return NameOf<ReplicaType>(kReplicaTypeNames, t);
}

}  // namespace lockstep::api
