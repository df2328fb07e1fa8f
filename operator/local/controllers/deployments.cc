#include "operator/local/controllers/deployments.h"

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/kube/api_error.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

constexpr char kDeploymentsLog[] = "deployments";
constexpr char kHashLabel[] = "pod-template-hash";
const kube::Resource kDeployments{"apps", "v1", "deployments", "Deployment", true};

std::string MetaOf(const json& obj, const char* key) {
  const json* meta = api::ObjectAt(obj, "metadata");
  return meta ? api::StringAt(*meta, key) : "";
}

bool OwnedBy(const json& pod, const std::string& uid) {
  const json* meta = api::ObjectAt(pod, "metadata");
  if (!meta) return false;
  auto refs = meta->find("ownerReferences");
  if (refs == meta->end() || !refs->is_array()) return false;
  for (const json& r : *refs) {
    if (api::StringAt(r, "uid") == uid) return true;
  }
  return false;
}

bool Terminating(const json& pod) {
  const json* meta = api::ObjectAt(pod, "metadata");
  return meta && meta->contains("deletionTimestamp");
}

std::string Phase(const json& pod) {
  const json* status = api::ObjectAt(pod, "status");
  return status ? api::StringAt(*status, "phase") : "";
}

bool Ready(const json& pod) {
  const json* status = api::ObjectAt(pod, "status");
  auto conds = status ? status->find("conditions") : json::const_iterator();
  if (!status || conds == status->end() || !conds->is_array()) return false;
  for (const json& c : *conds) {
    if (api::StringAt(c, "type") == "Ready") return api::StringAt(c, "status") == "True";
  }
  return false;
}

}  // namespace

std::string PodTemplateHash(const json& pod_template) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : pod_template.dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%010x", h & 0xffffffffffull);
}

DeploymentController::DeploymentController(kube::RestClient* client, common::Clock* clock,
                                           absl::Duration interval)
    : client_(client), clock_(clock), interval_(interval) {}

void DeploymentController::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    Sync();
    clock_->SleepFor(interval_, stop);
  }
}

void DeploymentController::Sync() {
  absl::StatusOr<json> deployments = client_->List(kDeployments, "");
  if (!deployments.ok()) {
    common::LogWarning(kDeploymentsLog, "listing deployments: ", deployments.status().message());
    return;
  }
  const json& items = (*deployments)["items"];
  if (!items.is_array() || items.empty()) return;
  absl::StatusOr<json> pods = client_->List(kube::resources::kPods, "");
  if (!pods.ok()) {
    common::LogWarning(kDeploymentsLog, "listing pods: ", pods.status().message());
    return;
  }
  for (const json& d : items) {
    if (!Terminating(d)) SyncOne(d, (*pods)["items"]);
  }
}

void DeploymentController::SyncOne(const json& d, const json& pods) {
  const std::string ns = MetaOf(d, "namespace"), name = MetaOf(d, "name"), uid = MetaOf(d, "uid");
  const json* spec = api::ObjectAt(d, "spec");
  const json* tmpl = spec ? api::ObjectAt(*spec, "template") : nullptr;
  if (!tmpl) return;
  int64_t replicas = spec->value("replicas", int64_t{1});
  std::string hash = PodTemplateHash(*tmpl);

  std::vector<const json*> current;
  int64_t total = 0, ready = 0;
  for (const json& pod : pods) {
    if (MetaOf(pod, "namespace") != ns || !OwnedBy(pod, uid) || Terminating(pod)) continue;
    const json* meta = api::ObjectAt(pod, "metadata");
    const json* labels = meta ? api::ObjectAt(*meta, "labels") : nullptr;
    std::string pod_hash = labels ? api::StringAt(*labels, kHashLabel) : "";
    std::string phase = Phase(pod);
    if (pod_hash != hash || phase == "Failed" || phase == "Succeeded") {
      // An old template's pod, or one that ended: replaced.
      (void)client_->Delete(kube::resources::kPods, ns, MetaOf(pod, "name"),
                            {.precondition_uid = MetaOf(pod, "uid")});
      continue;
    }
    if (static_cast<int64_t>(current.size()) >= replicas) {
      (void)client_->Delete(kube::resources::kPods, ns, MetaOf(pod, "name"),
                            {.precondition_uid = MetaOf(pod, "uid")});
      continue;
    }
    ++total;
    current.push_back(&pod);
    if (Ready(pod)) ++ready;
  }
  for (int64_t i = static_cast<int64_t>(current.size()); i < replicas; ++i) {
    json meta = tmpl->contains("metadata") ? (*tmpl)["metadata"] : json::object();
    meta["generateName"] = StrCat(name, "-", hash, "-");  // the API server adds 5 characters
    meta["namespace"] = ns;
    meta["labels"][kHashLabel] = hash;
    meta["ownerReferences"] = json::array({{{"apiVersion", "apps/v1"},
                                            {"kind", "Deployment"},
                                            {"name", name},
                                            {"uid", uid},
                                            {"controller", true},
                                            {"blockOwnerDeletion", true}}});
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", std::move(meta)},
                {"spec", tmpl->value("spec", json::object())}};
    absl::StatusOr<json> created = client_->Create(kube::resources::kPods, ns, pod);
    if (!created.ok()) {
      common::LogWarning(kDeploymentsLog, "creating a pod of ", ns, "/", name, ": ",
                         created.status().message());
      break;
    }
    common::LogInfo(kDeploymentsLog, ns, "/", name, ": created pod ", MetaOf(*created, "name"));
  }

  // Available when at most a quarter of the replicas (rounded down, as maxUnavailable 25%)
  // are not ready.
  bool available = ready >= replicas - replicas / 4;
  int64_t generation = api::ObjectAt(d, "metadata")->value("generation", int64_t{1});
  json status = {{"observedGeneration", generation},
                 {"replicas", total},
                 {"updatedReplicas", total},
                 {"readyReplicas", ready},
                 {"availableReplicas", ready},
                 {"unavailableReplicas", std::max<int64_t>(0, replicas - ready)}};
  const json* old = api::ObjectAt(d, "status");
  auto condition = [&](const char* type, bool value, const char* reason, std::string message) {
    std::string now = api::FormatKubeTime(clock_->Now());
    std::string since = now;
    if (old && old->contains("conditions") && (*old)["conditions"].is_array()) {
      for (const json& c : (*old)["conditions"]) {
        if (api::StringAt(c, "type") == type &&
            api::StringAt(c, "status") == (value ? "True" : "False")) {
          since = api::StringAt(c, "lastTransitionTime");
        }
      }
    }
    return json{{"type", type},
                {"status", value ? "True" : "False"},
                {"reason", reason},
                {"message", std::move(message)},
                {"lastTransitionTime", since}};
  };
  status["conditions"] =
      json::array({condition("Available", available,
                             available ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable",
                             StrCat(ready, " of ", replicas, " replicas ready")),
                   condition("Progressing", true, "NewReplicaSetAvailable",
                             StrCat("pods of template ", hash))});
  if (old && *old == status) return;
  json updated = d;
  updated["status"] = std::move(status);
  absl::StatusOr<json> r = client_->UpdateStatus(kDeployments, ns, updated);
  if (!r.ok() && !kube::IsApiConflict(r.status()) && !kube::IsApiNotFound(r.status())) {
    common::LogWarning(kDeploymentsLog, "status of ", ns, "/", name, ": ", r.status().message());
  }
}

}  // namespace lockstep::local
