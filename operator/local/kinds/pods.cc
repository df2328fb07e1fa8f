// Pods: kubelet-facing defaults, a container required, graceful deletion (a pod on a node is
// marked and stops before the runner removes it), and the Ready/Status/Restarts columns.

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

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

class Pods final : public KindStrategy {
 public:
  void PrepareForCreate(const ResourceType&, json& obj) const override {
    if (auto spec = obj.find("spec"); spec != obj.end() && spec->is_object()) {
      if (!spec->contains("restartPolicy")) (*spec)["restartPolicy"] = "Always";
      if (!spec->contains("terminationGracePeriodSeconds")) {
        (*spec)["terminationGracePeriodSeconds"] = 30;
      }
    }
    obj["status"] = {{"phase", "Pending"}};
  }

  api::FieldErrors Validate(const ResourceType&, const json& obj, const json*) const override {
    const json* spec = api::ObjectAt(obj, "spec");
    auto containers = spec ? spec->find("containers") : obj.end();
    if (!spec || containers == spec->end() || !containers->is_array() || containers->empty()) {
      return {api::Required(api::FieldPath("spec.containers"), "a pod needs a container")};
    }
    return {};
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
