#pragma once
// The status parts of a core/v1 Pod that both the Kubernetes client's pod projection
// (kube/pod.h) and the planner's observed pod (trainingjob/observed.h) carry: container
// states and statuses, and pod conditions.
// Thread-safety: plain values.

#include <cstdint>
#include <string>

namespace lockstep::api {

struct ContainerState {
  enum class Kind { kUnknown, kWaiting, kRunning, kTerminated };
  Kind kind = Kind::kUnknown;
  std::string reason;
  std::string message;  // for terminated containers: the termination message
  int32_t exit_code = 0;

  bool operator==(const ContainerState&) const = default;
};

struct ContainerStatus {
  std::string name;
  bool ready = false;
  int32_t restart_count = 0;
  ContainerState state;
  ContainerState last_state;
};

struct PodCondition {
  std::string type;
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
};

}  // namespace lockstep::api
