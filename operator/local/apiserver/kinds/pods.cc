// Pods: the defaults a real API server fills (pkg/apis/core/v1/defaults.go and the
// ServiceAccount admission), containers required and named, a spec that does not change after
// creation but where Kubernetes allows it, graceful deletion (a pod on a node is marked and
// stops before the runner removes it), and the Ready/Status/Restarts columns.

#include <algorithm>
#include <set>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"
#include "operator/api/pod_template.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// BestEffort without requests or limits, Guaranteed when every container's limits equal its
// requests for cpu and memory, Burstable otherwise (what the API server records at creation).
std::string QosClass(const json& pod) {
  const json* spec = api::ObjectAt(pod, "spec");
  auto cs = spec ? spec->find("containers") : pod.end();
  if (!spec || cs == spec->end() || !cs->is_array()) return "BestEffort";
  bool any = false, guaranteed = true;
  for (const json& c : *cs) {
    const json* res = c.is_object() ? api::ObjectAt(c, "resources") : nullptr;
    const json* limits = res ? api::ObjectAt(*res, "limits") : nullptr;
    const json* requests = res ? api::ObjectAt(*res, "requests") : nullptr;
    for (const char* r : {"cpu", "memory"}) {
      bool limit = limits && limits->contains(r);
      bool request = requests && requests->contains(r);
      any = any || limit || request;
      // A request defaults to its limit.
      if (!limit || (request && (*requests)[r] != (*limits)[r])) guaranteed = false;
    }
  }
  if (!any) return "BestEffort";
  return guaranteed ? "Guaranteed" : "Burstable";
}

// "ready/total" containers, or the sum of their restarts.
json ContainerCount(const json& obj, bool restarts_only) {
  int ready = 0, total = 0, restarts = 0;
  if (const json* spec = api::ObjectAt(obj, "spec");
      spec && spec->contains("containers") && (*spec)["containers"].is_array()) {
    total = static_cast<int>((*spec)["containers"].size());
  }
  if (const json* status = api::ObjectAt(obj, "status")) {
    auto cs = status->find("containerStatuses");
    if (cs != status->end() && cs->is_array()) {
      for (const json& s : *cs) {
        if (s.is_object() && s.contains("ready") && s["ready"] == true) ++ready;
        if (s.is_object() && s.contains("restartCount") && s["restartCount"].is_number_integer()) {
          restarts += s["restartCount"].get<int>();
        }
      }
    }
  }
  return restarts_only ? json(std::to_string(restarts)) : json(StrCat(ready, "/", total));
}

// What `kubectl get pods` shows as STATUS: Terminating, a container's reason, or the phase.
json PodStatusCell(const json& obj) {
  const json* meta = api::ObjectAt(obj, "metadata");
  if (meta && meta->contains("deletionTimestamp")) return "Terminating";
  const json* status = api::ObjectAt(obj, "status");
  if (!status) return "Pending";
  std::string reason = api::StringAt(*status, "reason");
  if (auto cs = status->find("containerStatuses"); cs != status->end() && cs->is_array()) {
    for (const json& s : *cs) {
      const json* state = api::ObjectAt(s, "state");
      for (const char* k : {"waiting", "terminated"}) {
        const json* detail = state ? api::ObjectAt(*state, k) : nullptr;
        if (detail && !api::StringAt(*detail, "reason").empty()) {
          reason = api::StringAt(*detail, "reason");
        }
      }
    }
  }
  return reason.empty() ? json(api::StringAt(*status, "phase")) : json(reason);
}

void SetDefault(json& obj, const char* key, json value) {
  if (!obj.contains(key) || obj[key].is_null()) obj[key] = std::move(value);
}

// A container's defaults: where its termination message goes, when its image is pulled
// (Always for an untagged or :latest image), its ports' protocol.
void DefaultContainer(json& c) {
  if (!c.is_object()) return;
  SetDefault(c, "terminationMessagePath", "/dev/termination-log");
  SetDefault(c, "terminationMessagePolicy", "File");
  SetDefault(c, "resources", json::object());
  if (!c.contains("imagePullPolicy") && c.contains("image") && c["image"].is_string()) {
    std::string image = c["image"];
    size_t slash = image.rfind('/');
    std::string last = slash == std::string::npos ? image : image.substr(slash + 1);
    bool digest = last.find('@') != std::string::npos;
    size_t colon = last.find(':');
    bool latest = !digest && (colon == std::string::npos || last.substr(colon + 1) == "latest");
    c["imagePullPolicy"] = latest ? "Always" : "IfNotPresent";
  }
  if (auto ports = c.find("ports"); ports != c.end() && ports->is_array()) {
    for (json& p : *ports) {
      if (p.is_object()) SetDefault(p, "protocol", "TCP");
    }
  }
}

// The spec with what an update may change set from `old`: container images, a shorter or new
// activeDeadlineSeconds, tolerations that only add to the old ones, scheduling gates taken off.
json WithAllowedChangesUndone(json spec, const json& old) {
  if (!spec.is_object() || !old.is_object()) return spec;
  for (const char* list : {"containers", "initContainers"}) {
    auto now = spec.find(list);
    auto was = old.find(list);
    if (now == spec.end() || was == old.end() || !now->is_array() || !was->is_array() ||
        now->size() != was->size()) {
      continue;
    }
    for (size_t i = 0; i < now->size(); ++i) {
      if ((*now)[i].is_object() && (*was)[i].is_object() && (*was)[i].contains("image")) {
        (*now)[i]["image"] = (*was)[i]["image"];
      }
    }
  }
  auto deadline = spec.find("activeDeadlineSeconds");
  auto old_deadline = old.find("activeDeadlineSeconds");
  if (deadline != spec.end() && deadline->is_number_integer() && deadline->get<int64_t>() > 0 &&
      (old_deadline == old.end() || old_deadline->is_null() ||
       (old_deadline->is_number_integer() && *deadline <= *old_deadline))) {
    if (old_deadline == old.end()) {
      spec.erase("activeDeadlineSeconds");
    } else {
      *deadline = *old_deadline;
    }
  }
  auto tolerations = spec.find("tolerations");
  auto old_tolerations = old.find("tolerations");
  if (tolerations != spec.end() && tolerations->is_array()) {
    json before = old_tolerations != old.end() ? *old_tolerations : json::array();
    bool adds_only =
        before.is_array() && std::all_of(before.begin(), before.end(), [&](auto& t) {
          return std::find(tolerations->begin(), tolerations->end(), t) != tolerations->end();
        });
    if (adds_only) {
      if (old_tolerations == old.end()) {
        spec.erase("tolerations");
      } else {
        *tolerations = *old_tolerations;
      }
    }
  }
  // Scheduling gates may be taken off (a queue's admission), never added.
  auto gates = spec.find("schedulingGates");
  auto old_gates = old.find("schedulingGates");
  const json before_gates = old_gates != old.end() ? *old_gates : json::array();
  const json after_gates = gates != spec.end() && !gates->is_null() ? *gates : json::array();
  if (before_gates.is_array() && after_gates.is_array() &&
      std::all_of(after_gates.begin(), after_gates.end(), [&](const json& g) {
        return std::find(before_gates.begin(), before_gates.end(), g) != before_gates.end();
      })) {
    if (old_gates == old.end()) {
      spec.erase("schedulingGates");
    } else {
      spec["schedulingGates"] = *old_gates;
    }
  }
  return spec;
}

class Pods final : public KindStrategy {
 public:
  void PrepareForCreate(const ResourceType&, json& obj) const override {
    if (auto spec = obj.find("spec"); spec != obj.end() && spec->is_object()) {
      // The ServiceAccount admission's default, and the Priority admission's.
      SetDefault(*spec, "serviceAccountName", "default");
      SetDefault(*spec, "priority", 0);
    }
    obj["status"] = {{"phase", "Pending"}, {"qosClass", QosClass(obj)}};
    // A pod created with scheduling gates says why it is not scheduled, as the API server does.
    if (const json* spec = api::ObjectAt(obj, "spec");
        spec != nullptr && spec->contains("schedulingGates") &&
        (*spec)["schedulingGates"].is_array() && !(*spec)["schedulingGates"].empty()) {
      obj["status"]["conditions"] =
          json::array({{{"type", "PodScheduled"},
                        {"status", "False"},
                        {"reason", "SchedulingGated"},
                        {"message", "Scheduling is blocked due to non-empty scheduling gates"}}});
    }
  }

  absl::Status Normalize(const ResourceType&, json& obj, bool) const override {
    auto spec = obj.find("spec");
    if (spec == obj.end() || !spec->is_object()) return absl::OkStatus();
    SetDefault(*spec, "restartPolicy", "Always");
    SetDefault(*spec, "terminationGracePeriodSeconds", 30);
    SetDefault(*spec, "dnsPolicy", "ClusterFirst");
    SetDefault(*spec, "schedulerName", "default-scheduler");
    SetDefault(*spec, "securityContext", json::object());
    SetDefault(*spec, "enableServiceLinks", true);
    if (spec->contains("serviceAccountName")) {
      SetDefault(*spec, "serviceAccount", (*spec)["serviceAccountName"]);  // the old name
    }
    for (const char* list : {"containers", "initContainers"}) {
      if (auto cs = spec->find(list); cs != spec->end() && cs->is_array()) {
        for (json& c : *cs) DefaultContainer(c);
      }
    }
    return absl::OkStatus();
  }

  api::FieldErrors Validate(const ResourceType&, const json& obj, const json*) const override {
    const json* spec = api::ObjectAt(obj, "spec");
    auto containers = spec ? spec->find("containers") : obj.end();
    if (!spec || containers == spec->end() || !containers->is_array() || containers->empty()) {
      return {api::Required(api::FieldPath("spec.containers"), "a pod needs a container")};
    }
    api::FieldErrors errors;
    std::set<std::string> names;
    for (const char* list : {"initContainers", "containers"}) {
      auto cs = spec->find(list);
      if (cs == spec->end() || cs->is_null()) continue;
      api::FieldPath path = api::FieldPath("spec").Child(list);
      if (!cs->is_array()) {
        errors.push_back(api::Invalid(path, api::RenderValue(*cs), "must be a list"));
        continue;
      }
      for (size_t i = 0; i < cs->size(); ++i) {
        const json& c = (*cs)[i];
        std::string name = c.is_object() ? api::StringAt(c, "name") : "";
        if (name.empty()) {
          errors.push_back(api::Required(path.Index(i).Child("name"), ""));
        } else {
          for (std::string& why : api::CheckDns1123Label(name)) {
            errors.push_back(api::Invalid(path.Index(i).Child("name"), api::QuoteJson(name), why));
          }
          if (!names.insert(name).second) {
            errors.push_back(api::Duplicate(path.Index(i).Child("name"), api::QuoteJson(name)));
          }
        }
        if (!c.is_object() || api::StringAt(c, "image").empty()) {
          errors.push_back(api::Required(path.Index(i).Child("image"), ""));
        }
      }
    }
    api::FieldErrors volumes = api::ValidatePodVolumes(*spec, api::FieldPath("spec"));
    errors.insert(errors.end(), volumes.begin(), volumes.end());
    std::string restart = api::StringAt(*spec, "restartPolicy");
    if (restart != "Always" && restart != "OnFailure" && restart != "Never") {
      errors.push_back(api::NotSupported(api::FieldPath("spec.restartPolicy"),
                                         api::QuoteJson(restart),
                                         {"Always", "OnFailure", "Never"}));
    }
    std::string dns = api::StringAt(*spec, "dnsPolicy");
    if (dns != "ClusterFirstWithHostNet" && dns != "ClusterFirst" && dns != "Default" &&
        dns != "None") {
      errors.push_back(
          api::NotSupported(api::FieldPath("spec.dnsPolicy"), api::QuoteJson(dns),
                            {"ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"}));
    }
    return errors;
  }

  // pkg/apis/core/validation's ValidatePodUpdate: a pod's spec is fixed once created, but for
  // images, the active deadline and added tolerations.
  api::FieldErrors ValidateUpdate(const ResourceType&, const json& obj,
                                  const json& old) const override {
    const json* spec = api::ObjectAt(obj, "spec");
    const json* old_spec = api::ObjectAt(old, "spec");
    if (!spec || !old_spec) return {};
    json undone = WithAllowedChangesUndone(*spec, *old_spec);
    if (undone == *old_spec) return {};
    std::vector<std::string> changed;
    for (auto it = undone.begin(); it != undone.end(); ++it) {
      if (!old_spec->contains(it.key()) || (*old_spec)[it.key()] != *it)
        changed.push_back(it.key());
    }
    for (auto it = old_spec->begin(); it != old_spec->end(); ++it) {
      if (!undone.contains(it.key())) changed.push_back(it.key());
    }
    return {api::Forbidden(
        api::FieldPath("spec"),
        StrCat("pod updates may not change fields other than `spec.containers[*].image`, "
               "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
               "(only additions to existing tolerations) (changed: spec.",
               StrJoin(changed, ", spec."), ")"))};
  }

  std::vector<std::string> FieldLabels() const override {
    return {"spec.nodeName",           "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "status.phase",       "status.podIP",
            "status.nominatedNodeName"};
  }

  // A pod bound to a node and not finished stops first: the spec's grace period, or the
  // request's.
  std::optional<int64_t> GracefulDeletionPeriod(const json& obj,
                                                const json& options) const override {
    const json* spec = api::ObjectAt(obj, "spec");
    int64_t grace = 30;
    if (spec && spec->contains("terminationGracePeriodSeconds") &&
        (*spec)["terminationGracePeriodSeconds"].is_number_integer()) {
      grace = (*spec)["terminationGracePeriodSeconds"].get<int64_t>();
    }
    if (options.contains("gracePeriodSeconds") &&
        options["gracePeriodSeconds"].is_number_integer()) {
      grace = options["gracePeriodSeconds"].get<int64_t>();
    }
    const json* status = api::ObjectAt(obj, "status");
    std::string phase = status ? api::StringAt(*status, "phase") : "";
    bool running = spec && !api::StringAt(*spec, "nodeName").empty() && phase != "Succeeded" &&
                   phase != "Failed";
    if (running && grace > 0) return grace;
    return std::nullopt;
  }

  bool AwaitsGracefulStop(const json& obj) const override {
    const json* meta = api::ObjectAt(obj, "metadata");
    return meta && meta->contains("deletionTimestamp") &&
           meta->contains("deletionGracePeriodSeconds") &&
           (*meta)["deletionGracePeriodSeconds"] != 0;
  }

  std::vector<TableColumn> TableColumns(const ResourceType&) const override {
    return {NameColumn(),
            {"Ready", "string", "", 0, [](const json& o) { return ContainerCount(o, false); }},
            {"Status", "string", "", 0, PodStatusCell},
            {"Restarts", "string", "", 0, [](const json& o) { return ContainerCount(o, true); }},
            AgeColumn()};
  }
};

}  // namespace

const KindStrategy& PodStrategy() {
  static const Pods pods;
  return pods;
}

}  // namespace lockstep::local
