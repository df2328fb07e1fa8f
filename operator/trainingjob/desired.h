#pragma once
// Desired state: the pod, headless Service, token Secret and PodGroup a TrainingJob should
// have, built as plain JSON values (DESIGN section 3). Nothing here talks to the API server.
//
// A pod is the replica's template with the operator's parts laid over it: name, namespace,
// labels (ours win over the template's), the controller owner reference, the mapped restart
// policy (ExitCode becomes Never so the operator sees every exit code), the training port when
// the template has none, and the injected environment. A variable the user already set in the
// training container is kept; its name is reported through `kept_env` so the caller can warn.
// Thread-safety: pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/trainingjob_types.h"

namespace lockstep::trainingjob {

enum class GangScheduler { kNone, kVolcano, kSchedulerPlugins };

struct DesiredOptions {
  std::string cluster_domain;  // the operator's --cluster-domain; the job's own wins
  GangScheduler gang = GangScheduler::kNone;
};

// `incarnation`: the pod's number among those of its replica within the attempt (in-place
// recovery recreates a lost pod alone, as the next incarnation).
nlohmann::json DesiredPod(const api::TrainingJob& job, api::ReplicaType type, int32_t index,
                          int32_t attempt, const DesiredOptions& options,
                          std::vector<std::string>* kept_env = nullptr, int32_t incarnation = 0);

nlohmann::json DesiredService(const api::TrainingJob& job, api::ReplicaType type, int32_t index);

// `token` is the job's random peer token (the caller draws it; this stays pure).
nlohmann::json DesiredTokenSecret(const api::TrainingJob& job, const std::string& token);

// The PodGroup of the configured gang scheduler; minMember is schedulingPolicy.minAvailable,
// else every replica. Not meaningful for GangScheduler::kNone.
nlohmann::json DesiredPodGroup(const api::TrainingJob& job, GangScheduler gang);
// The PodGroup API of the configured gang scheduler (the reconciler builds its REST resource
// from these): "scheduling.volcano.sh"/"v1beta1" or "scheduling.x-k8s.io"/"v1alpha1".
struct GroupVersion {
  std::string_view group;
  std::string_view version;
};
GroupVersion PodGroupVersion(GangScheduler gang);

// The Kueue LocalQueue a job's pods are queued in as one Kueue pod group: the job's
// kueue.x-k8s.io/queue-name label, else runPolicy.schedulingPolicy.queue unless that is
// Volcano's (--gang-scheduler=volcano), and for a TFJob, whose schedulingPolicy.queue is
// Volcano's. None for an elastic job, whose group changes size.
std::optional<std::string> KueueQueue(const api::TrainingJob& job, GangScheduler gang);
// The pod group's name (Kueue's Workload is named after it): the job's name (its first 54
// characters) and the start of its UID, so that a job recreated under its name is a new group.
std::string KueueGroupName(const api::TrainingJob& job);

// The restart policy the pod itself gets.
std::string_view PodRestartPolicy(api::RestartPolicy policy);

}  // namespace lockstep::trainingjob
