#include "operator/trainingjob/desired.h"

#include <set>

#include "absl/strings/escaping.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/validation.h"
#include "operator/trainingjob/labels.h"
#include "operator/trainingjob/tf_config.h"

namespace lockstep::trainingjob {
namespace {

using nlohmann::json;

json OwnerRefJson(const api::TrainingJob& job) {
  api::OwnerReference r = ControllerRef(job);
  return json::array({{{"apiVersion", r.api_version},
                       {"kind", r.kind},
                       {"name", r.name},
                       {"uid", r.uid},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

std::map<std::string, std::string> ReplicaLabels(const api::TrainingJob& job, api::ReplicaType type,
                                                 int32_t index) {
  std::map<std::string, std::string> labels = {
      {std::string(kJobNameLabel), job.metadata.name},
      {std::string(kReplicaTypeLabel), std::string(api::ReplicaTypeLower(type))},
      {std::string(kReplicaIndexLabel), std::to_string(index)}};
  if (job.tfjob) {
    labels[std::string(kKubeflowJobNameLabel)] = job.metadata.name;
    labels[std::string(kKubeflowOperatorNameLabel)] = kKubeflowOperatorName;
    labels[std::string(kKubeflowReplicaTypeLabel)] = api::ReplicaTypeLower(job, type);
    labels[std::string(kKubeflowReplicaIndexLabel)] = std::to_string(index);
  }
  return labels;
}

// The labels of the job's Secret and PodGroup: its name (Kubeflow's too for a served TFJob).
std::map<std::string, std::string> JobLabels(const api::TrainingJob& job) {
  std::map<std::string, std::string> labels = {{std::string(kJobNameLabel), job.metadata.name}};
  if (job.tfjob) labels[std::string(kKubeflowJobNameLabel)] = job.metadata.name;
  return labels;
}

// training-operator's IsMasterRole: the chief (Master), else worker 0.
bool IsMasterRole(const api::TrainingJob& job, api::ReplicaType type, int32_t index) {
  if (job.spec.replica_specs.contains(api::ReplicaType::kChief)) {
    return type == api::ReplicaType::kChief;
  }
  return type == api::ReplicaType::kWorker && index == 0;
}

json Metadata(const api::TrainingJob& job, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  json meta = json::object();
  meta["name"] = name;
  meta["namespace"] = job.metadata.namespace_;
  meta["labels"] = labels;
  meta["ownerReferences"] = OwnerRefJson(job);
  return meta;
}

json ValueEnv(std::string_view name, std::string value) {
  return {{"name", name}, {"value", std::move(value)}};
}

// Appends `var` unless the container already sets a variable of that name.
void AddEnv(json* env, json var, std::vector<std::string>* kept) {
  const std::string& name = var["name"].get_ref<const std::string&>();
  for (const json& e : *env) {
    if (e.is_object() && e.value("name", "") == name) {
      if (kept != nullptr) kept->push_back(name);
      return;
    }
  }
  env->push_back(std::move(var));
}

}  // namespace

std::optional<std::string> KueueQueue(const api::TrainingJob& job, GangScheduler gang) {
  if (job.spec.run_policy.elastic) return std::nullopt;
  auto label = job.metadata.labels.find(std::string(kKueueQueueLabel));
  if (label != job.metadata.labels.end() && !label->second.empty()) return label->second;
  // A TFJob's schedulingPolicy.queue is Volcano's, as training-operator reads it.
  if (job.tfjob) return std::nullopt;
  const std::optional<api::SchedulingPolicy>& sched = job.spec.run_policy.scheduling_policy;
  if (sched && !sched->queue.empty() && gang != GangScheduler::kVolcano) return sched->queue;
  return std::nullopt;
}

std::string KueueGroupName(const api::TrainingJob& job) {
  // A label value: 63 characters at most.
  if (job.metadata.uid.empty()) return job.metadata.name.substr(0, 63);
  return StrCat(std::string_view(job.metadata.name).substr(0, 54), "-",
                std::string_view(job.metadata.uid).substr(0, 8));
}

std::string_view PodRestartPolicy(api::RestartPolicy policy) {
  switch (policy) {
    case api::RestartPolicy::kAlways:
      return "Always";
    case api::RestartPolicy::kOnFailure:
      return "OnFailure";
    case api::RestartPolicy::kNever:
    case api::RestartPolicy::kExitCode:
      return "Never";
  }
  return "Never";
}

json DesiredPod(const api::TrainingJob& job, api::ReplicaType type, int32_t index, int32_t attempt,
                const DesiredOptions& options, std::vector<std::string>* kept_env,
                int32_t incarnation) {
  const api::ReplicaSpec& spec = job.spec.replica_specs.at(type);
  const json tmpl = spec.pod_template.raw();
  std::string name = api::ReplicaName(job, type, index);

  std::map<std::string, std::string> labels;
  if (const json* tl = api::ObjectAt(tmpl, "metadata"); tl != nullptr) {
    if (const json* l = api::ObjectAt(*tl, "labels"); l != nullptr) {
      for (const auto& [k, v] : l->items()) {
        if (v.is_string()) labels[k] = v.get<std::string>();
      }
    }
  }
  // A TrainingJob's pods must not look like a TFJob's to the controllers' watches.
  if (!job.tfjob) labels.erase(std::string(kKubeflowJobNameLabel));
  for (auto& [k, v] : ReplicaLabels(job, type, index)) labels[k] = v;
  if (job.tfjob && IsMasterRole(job, type, index)) {
    labels[std::string(kKubeflowJobRoleLabel)] = "master";
  }
  labels[std::string(kAttemptLabel)] = std::to_string(attempt);
  labels[std::string(kIncarnationLabel)] = std::to_string(incarnation);

  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}};
  pod["metadata"] = Metadata(job, name, labels);
  json annotations = json::object();
  if (const json* tm = api::ObjectAt(tmpl, "metadata"); tm != nullptr) {
    if (const json* a = api::ObjectAt(*tm, "annotations"); a != nullptr) annotations = *a;
  }
  if (std::optional<std::string> queue = KueueQueue(job, options.gang)) {
    // One Kueue pod group of every replica: Kueue's webhook gates each pod until the group is
    // admitted (docs/tasks/queue-with-kueue.md).
    int32_t total = 0;
    for (const auto& [t, s] : job.spec.replica_specs) total += s.replicas;
    pod["metadata"]["labels"][std::string(kKueueQueueLabel)] = *queue;
    pod["metadata"]["labels"][std::string(kKueueGroupLabel)] = KueueGroupName(job);
    annotations[std::string(kKueueTotalCountAnnotation)] = std::to_string(total);
  }
  json pod_spec = json::object();
  if (const json* s = api::ObjectAt(tmpl, "spec"); s != nullptr) pod_spec = *s;
  pod_spec["restartPolicy"] = PodRestartPolicy(spec.restart_policy);

  const std::optional<api::SchedulingPolicy>& sched = job.spec.run_policy.scheduling_policy;
  if (sched && !sched->priority_class.empty() && !pod_spec.contains("priorityClassName")) {
    pod_spec["priorityClassName"] = sched->priority_class;
  }
  if (options.gang == GangScheduler::kVolcano) {
    pod_spec["schedulerName"] = "volcano";
    annotations["scheduling.k8s.io/group-name"] = job.metadata.name;
  } else if (options.gang == GangScheduler::kSchedulerPlugins) {
    pod_spec["schedulerName"] = "scheduler-plugins-scheduler";
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = job.metadata.name;
  }
  if (!annotations.empty()) pod["metadata"]["annotations"] = std::move(annotations);

  // The training container: a TFJob's "tensorflow", a TrainingJob's TrainingContainer.
  const api::Container* training = TrainingContainerOf(job, type);
  if (training != nullptr && pod_spec.contains("containers") && pod_spec["containers"].is_array()) {
    for (json& c : pod_spec["containers"]) {
      if (!c.is_object() || c.value("name", "") != training->name) continue;
      if ((job.tfjob || training->FindPort(api::kTrainingPortName) == nullptr) &&
          training->FindPort(api::kKubeflowPortName) == nullptr) {
        if (!c.contains("ports") || !c["ports"].is_array()) c["ports"] = json::array();
        // A TFJob's is named as training-operator's defaulting names it.
        c["ports"].push_back({{"name", job.tfjob ? api::kKubeflowPortName : api::kTrainingPortName},
                              {"containerPort", api::kDefaultTrainingPort},
                              {"protocol", "TCP"}});
      }
      if (!c.contains("env") || !c["env"].is_array()) c["env"] = json::array();
      json* env = &c["env"];
      if (std::optional<std::string> tf = BuildTfConfig(job, type, index, options.cluster_domain)) {
        AddEnv(env, ValueEnv("TF_CONFIG", *tf), kept_env);
      }
      AddEnv(env, ValueEnv("LOCKSTEP_JOB_NAME", job.metadata.name), kept_env);
      AddEnv(env, ValueEnv("LOCKSTEP_NAMESPACE", job.metadata.namespace_), kept_env);
      AddEnv(env, ValueEnv("LOCKSTEP_REPLICA_TYPE", std::string(api::ReplicaTypeLower(type))),
             kept_env);
      AddEnv(env, ValueEnv("LOCKSTEP_REPLICA_INDEX", std::to_string(index)), kept_env);
      AddEnv(env,
             ValueEnv("LOCKSTEP_STRATEGY",
                      std::string(api::NameOf<api::Strategy>(api::kStrategyNames,
                                                             api::EffectiveStrategy(job.spec)))),
             kept_env);
      AddEnv(env, ValueEnv("LOCKSTEP_ATTEMPT", std::to_string(attempt)), kept_env);
      AddEnv(env, ValueEnv("LOCKSTEP_INCARNATION", std::to_string(incarnation)), kept_env);
      if (api::EffectiveStrategy(job.spec) == api::Strategy::kMultiWorkerMirrored) {
        AddEnv(env,
               ValueEnv("LOCKSTEP_RECOVERY",
                        std::string(api::NameOf<api::Recovery>(api::kRecoveryNames,
                                                               api::EffectiveRecovery(job.spec)))),
               kept_env);
        if (const std::optional<api::Elastic>& e = job.spec.run_policy.elastic) {
          AddEnv(env, ValueEnv("LOCKSTEP_ELASTIC_MAX_WORKERS", std::to_string(e->max_replicas)),
                 kept_env);
        }
      }
      json pod_ip = {{"name", "LOCKSTEP_POD_IP"}};
      pod_ip["valueFrom"]["fieldRef"] = {{"fieldPath", "status.podIP"}};
      AddEnv(env, std::move(pod_ip), kept_env);
      json token = {{"name", "LOCKSTEP_JOB_TOKEN"}};
      token["valueFrom"]["secretKeyRef"] = {{"name", TokenSecretName(job.metadata.name)},
                                            {"key", kTokenKey}};
      AddEnv(env, std::move(token), kept_env);
    }
  }
  pod["spec"] = std::move(pod_spec);
  return pod;
}

json DesiredService(const api::TrainingJob& job, api::ReplicaType type, int32_t index) {
  std::string name = api::ReplicaName(job, type, index);
  std::map<std::string, std::string> labels = ReplicaLabels(job, type, index);
  int32_t port = TrainingPortOf(job, type);
  json svc = {{"apiVersion", "v1"}, {"kind", "Service"}};
  svc["metadata"] = Metadata(job, name, labels);
  json spec = json::object();
  spec["clusterIP"] = "None";
  spec["publishNotReadyAddresses"] = true;
  spec["selector"] = labels;
  spec["ports"] =
      json::array({{{"name", job.tfjob ? api::kKubeflowPortName : api::kTrainingPortName},
                    {"port", port},
                    {"targetPort", port},
                    {"protocol", "TCP"}}});
  if (const api::Container* c = job.tfjob ? TrainingContainerOf(job, type) : nullptr) {
    // training-operator's Service carries every named port of the tensorflow container (a
    // Service of several ports needs each named; one unnamed, or repeating a number, is left
    // out rather than fail the Service).
    std::set<int32_t> numbers = {port};
    for (const api::ContainerPort& p : c->ports) {
      if (p.name.empty() || p.name == api::kKubeflowPortName ||
          !numbers.insert(p.container_port).second) {
        continue;
      }
      spec["ports"].push_back({{"name", p.name},
                               {"port", p.container_port},
                               {"targetPort", p.container_port},
                               {"protocol", p.protocol.empty() ? "TCP" : p.protocol}});
    }
  }
  svc["spec"] = std::move(spec);
  return svc;
}

json DesiredTokenSecret(const api::TrainingJob& job, const std::string& token) {
  json secret = {{"apiVersion", "v1"}, {"kind", "Secret"}, {"type", "Opaque"}};
  secret["metadata"] = Metadata(job, TokenSecretName(job.metadata.name), JobLabels(job));
  secret["data"] = {{std::string(kTokenKey), absl::Base64Escape(token)}};
  return secret;
}

GroupVersion PodGroupVersion(GangScheduler gang) {
  if (gang == GangScheduler::kVolcano) return {"scheduling.volcano.sh", "v1beta1"};
  return {"scheduling.x-k8s.io", "v1alpha1"};
}

json DesiredPodGroup(const api::TrainingJob& job, GangScheduler gang) {
  int32_t total = 0;
  for (const auto& [t, spec] : job.spec.replica_specs) total += spec.replicas;
  const std::optional<api::SchedulingPolicy>& sched = job.spec.run_policy.scheduling_policy;
  int32_t min_member = sched && sched->min_available ? *sched->min_available : total;
  GroupVersion gv = PodGroupVersion(gang);
  json pg = {{"apiVersion", StrCat(gv.group, "/", gv.version)}, {"kind", "PodGroup"}};
  pg["metadata"] = Metadata(job, job.metadata.name, JobLabels(job));
  json spec = {{"minMember", min_member}};
  if (gang == GangScheduler::kVolcano) {
    if (sched && !sched->queue.empty()) spec["queue"] = sched->queue;
    if (sched && !sched->priority_class.empty()) spec["priorityClassName"] = sched->priority_class;
  } else if (sched && sched->schedule_timeout_seconds) {
    spec["scheduleTimeoutSeconds"] = *sched->schedule_timeout_seconds;
  }
  pg["spec"] = std::move(spec);
  return pg;
}

}  // namespace lockstep::trainingjob
