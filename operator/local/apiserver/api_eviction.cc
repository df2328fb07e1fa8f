// POST pods/<name>/eviction: the Eviction API, as pkg/registry/core/pod/storage/eviction.go
// serves it. What `kubectl drain` and cluster autoscalers call: the pod's PodDisruptionBudget
// is honoured (429 when the eviction would leave fewer healthy pods than it asks), then the pod
// gets the DisruptionTarget condition (EvictionByEvictionAPI) and is deleted gracefully.

#include <cmath>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/api_server_impl.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

bool Ready(const json& pod) {
  const json* status = api::ObjectAt(pod, "status");
  if (status == nullptr || api::StringAt(*status, "phase") != "Running") return false;
  auto conds = status->find("conditions");
  if (conds == status->end() || !conds->is_array()) return false;
  for (const json& c : *conds) {
    if (c.is_object() && api::StringAt(c, "type") == "Ready") {
      return api::StringAt(c, "status") == "True";
    }
  }
  return false;
}

std::map<std::string, std::string> LabelsOf(const json& obj) {
  std::map<std::string, std::string> out;
  const json* meta = api::ObjectAt(obj, "metadata");
  const json* labels = meta != nullptr ? api::ObjectAt(*meta, "labels") : nullptr;
  if (labels == nullptr) return out;
  for (const auto& [k, v] : labels->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

// A metav1.LabelSelector (matchLabels and matchExpressions) as a selector; nullopt when it
// cannot be read. An empty one selects every pod of the namespace, as policy/v1 says.
std::optional<kube::LabelSelector> SelectorOf(const json& selector) {
  std::vector<std::string> parts;
  if (const json* labels = api::ObjectAt(selector, "matchLabels")) {
    for (const auto& [k, v] : labels->items()) {
      if (!v.is_string()) return std::nullopt;
      parts.push_back(StrCat(k, "=", v.get<std::string>()));
    }
  }
  if (auto exprs = selector.find("matchExpressions");
      exprs != selector.end() && exprs->is_array()) {
    for (const json& e : *exprs) {
      if (!e.is_object()) return std::nullopt;
      const std::string key = api::StringAt(e, "key");
      const std::string op = api::StringAt(e, "operator");
      std::vector<std::string> values;
      if (auto v = e.find("values"); v != e.end() && v->is_array()) {
        for (const json& x : *v) {
          if (x.is_string()) values.push_back(x.get<std::string>());
        }
      }
      if (op == "In" || op == "NotIn") {
        parts.push_back(StrCat(key, op == "In" ? " in (" : " notin (", StrJoin(values, ","), ")"));
      } else if (op == "Exists") {
        parts.push_back(key);
      } else if (op == "DoesNotExist") {
        parts.push_back("!" + key);
      } else {
        return std::nullopt;
      }
    }
  }
  absl::StatusOr<kube::LabelSelector> s = kube::LabelSelector::Parse(StrJoin(parts, ","));
  if (!s.ok()) return std::nullopt;
  return *s;
}

// An IntOrString of a budget against `expected` pods: an integer, or "N%" rounded up.
std::optional<int64_t> Scaled(const json& v, int64_t expected) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_string()) return std::nullopt;
  std::string s = v.get<std::string>();
  if (s.empty() || s.back() != '%') return std::nullopt;
  s.pop_back();
  char* end = nullptr;
  const long pct = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || pct < 0) return std::nullopt;
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(pct) * static_cast<double>(expected) / 100.0));
}

}  // namespace

ApiResponse ApiServer::Impl::Evict(const Route& route, const json& eviction) {
  const std::string kind = api::StringAt(eviction, "kind");
  if (!kind.empty() && kind != "Eviction") {
    return Fail(400, "BadRequest",
                StrCat("the body is a ", kind, "; pods/eviction takes an Eviction"));
  }
  if (const json* meta = api::ObjectAt(eviction, "metadata")) {
    const std::string name = api::StringAt(*meta, "name");
    if (!name.empty() && name != route.name) {
      return Fail(400, "BadRequest", StrCat("name in URL does not match name in Eviction object"));
    }
  }
  const std::string key = Key(route);
  ObjectPtr pod = s_->store_->Get(key);
  if (!pod) return StoreError(absl::NotFoundError(""), *route.type, route.name);
  const json options = eviction.contains("deleteOptions") && eviction["deleteOptions"].is_object()
                           ? eviction["deleteOptions"]
                           : json::object();
  json success = {{"kind", "Status"},
                  {"apiVersion", "v1"},
                  {"metadata", json::object()},
                  {"status", "Success"},
                  {"code", 201}};
  const json& meta = (*pod)["metadata"];
  if (meta.contains("deletionTimestamp")) return Reply(201, success);  // going already

  // The budget: pods that are not running (pending, finished) may go whatever it says.
  const json* status = api::ObjectAt(*pod, "status");
  const std::string phase = status != nullptr ? api::StringAt(*status, "phase") : "";
  if (phase == "Running") {
    std::shared_ptr<const ResourceType> pdbs =
        s_->registry_.FindByGroupResource("poddisruptionbudgets.policy");
    std::shared_ptr<const ResourceType> pods = s_->registry_.FindByGroupResource("pods");
    std::vector<std::pair<std::string, ObjectPtr>> matching;
    if (pdbs != nullptr) {
      for (auto& [k, pdb] : s_->store_->List(StorePrefix(pdbs->GroupResource(), route.ns)).first) {
        const json* spec = api::ObjectAt(*pdb, "spec");
        const json* sel = spec != nullptr ? api::ObjectAt(*spec, "selector") : nullptr;
        if (sel == nullptr) continue;  // policy/v1: a null selector selects nothing
        std::optional<kube::LabelSelector> s = SelectorOf(*sel);
        if (s && s->Matches(LabelsOf(*pod))) matching.emplace_back(k, pdb);
      }
    }
    if (matching.size() > 1) {
      return Fail(500, "InternalError",
                  "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                  "does not support.");
    }
    if (matching.size() == 1) {
      const json& pdb = *matching[0].second;
      const json& spec = pdb["spec"];
      const kube::LabelSelector selector = *SelectorOf(spec["selector"]);
      int64_t expected = 0;
      int64_t healthy = 0;
      for (auto& [k, p] : s_->store_->List(StorePrefix(pods->GroupResource(), route.ns)).first) {
        if (!selector.Matches(LabelsOf(*p))) continue;
        ++expected;
        if (!(*p)["metadata"].contains("deletionTimestamp") && Ready(*p)) ++healthy;
      }
      std::optional<int64_t> desired;
      if (spec.contains("minAvailable")) {
        desired = Scaled(spec["minAvailable"], expected);
      } else if (spec.contains("maxUnavailable")) {
        std::optional<int64_t> max = Scaled(spec["maxUnavailable"], expected);
        if (max) desired = std::max<int64_t>(0, expected - *max);
      } else {
        desired = 0;
      }
      const std::string pdb_name = pdb["metadata"].value("name", "");
      if (!desired) {
        return Fail(
            500, "InternalError",
            StrCat("the PodDisruptionBudget ", pdb_name, " has a budget that cannot be read"));
      }
      // A pod that is not healthy may go while the budget holds without it
      // (unhealthyPodEvictionPolicy IfHealthyBudget); a healthy one only if one more may.
      const bool allowed = Ready(*pod) ? healthy - 1 >= *desired : healthy >= *desired;
      if (!allowed) {
        return Fail(429, "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {{"causes",
                      {{{"reason", "DisruptionBudget"},
                        {"message", StrCat("The disruption budget ", pdb_name, " needs ", *desired,
                                           " healthy pods and has ", healthy, " currently")}}}}});
      }
    }
  }
  // The dry run of kubectl drain --dry-run=server comes in the Eviction's DeleteOptions.
  const bool dry_run =
      route.dry_run || (options.contains("dryRun") && options["dryRun"] == json::array({"All"}));
  if (dry_run) return Reply(201, success);

  // The condition first, then the graceful delete, as the registry does.
  json marked = *pod;
  json conditions = json::array();
  if (const json& old = marked["status"]["conditions"]; old.is_array()) {
    for (const json& c : old) {
      if (!c.is_object() || api::StringAt(c, "type") != "DisruptionTarget") conditions.push_back(c);
    }
  }
  conditions.push_back({{"type", "DisruptionTarget"},
                        {"status", "True"},
                        {"reason", "EvictionByEvictionAPI"},
                        {"message", "Eviction API: evicting"},
                        {"lastTransitionTime", api::FormatKubeTime(absl::Now())}});
  marked["status"]["conditions"] = std::move(conditions);
  absl::StatusOr<ObjectPtr> put =
      s_->store_->Put(key, std::move(marked), MetaString(*pod, "resourceVersion"));
  if (!put.ok()) return StoreError(put.status(), *route.type, route.name);
  Route plain = route;
  plain.subresource.clear();
  ApiResponse deleted = Delete(plain, options);
  if (deleted.status >= 300) return deleted;
  return Reply(201, success);
}

}  // namespace lockstep::local
