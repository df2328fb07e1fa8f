#pragma once
// TF_CONFIG as the trainer reads it: the cluster (task type -> "host:port" list), this task's
// type and index, and the environment. The format is Kubeflow TFJob v1's (DESIGN section 3):
//   {"cluster":{"worker":["t-worker-0.ns.svc:2222"]},"task":{"type":"worker","index":0},
//    "environment":"cloud"}
// Parsing never throws; every problem is an InvalidArgument status naming the field.
// Thread-safety: plain values.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::trainer {

struct TfConfig {
  std::map<std::string, std::vector<std::string>> cluster;
  std::string task_type;
  int32_t task_index = 0;
  std::string environment;

  // Addresses of `type` ("worker", "ps", ...); empty when the cluster has none.
  const std::vector<std::string>& Hosts(std::string_view type) const;
  // This task's own "host:port".
  const std::string& SelfAddress() const;
};

absl::StatusOr<TfConfig> ParseTfConfig(std::string_view text);

}  // namespace lockstep::trainer
