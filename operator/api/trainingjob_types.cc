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

}  // namespace lockstep::api
