#pragma once
// The lockstep-operator command line. Parsing is pure so that every flag, its default and its
// errors are tested without starting anything.
// Thread-safety: pure functions.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/trainingjob/desired.h"

namespace lockstep::cmd {

struct OperatorFlags {
  std::string kubeconfig;  // empty: in-cluster, then $KUBECONFIG / ~/.kube/config
  std::string context;
  std::string namespace_;  // empty: every namespace
  int workers = 4;
  double qps = 500;  // docs/tasks/operate-at-scale.md says how these were chosen
  int burst = 500;
  double event_qps = 50;  // Events' own budget (runtime/event_recorder.h)
  int event_burst = 100;
  std::string cluster_domain;
  trainingjob::GangScheduler gang = trainingjob::GangScheduler::kNone;
  bool tfjob = false;  // --tfjob: serve kubeflow.org/v1 TFJobs too
  bool leader_elect = false;
  std::string leader_election_namespace;  // empty: $POD_NAMESPACE, else "default"
  std::string leader_election_id = "lockstep-operator";
  std::string metrics_addr = ":8080";  // also serves /healthz and /readyz; "0" turns it off
  absl::Duration progress_interval = absl::Seconds(10);
  bool json_logs = false;
  bool help = false;
  bool version = false;
};

// InvalidArgument naming the flag on a bad value or an unknown flag.
absl::StatusOr<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args);
std::string OperatorUsage();

}  // namespace lockstep::cmd
