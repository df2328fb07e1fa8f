#include "operator/tfjob/served.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/str_util.h"
#include "operator/api/job_state.h"
#include "operator/api/json_reader.h"
#include "operator/api/trainingjob_json.h"
#include "operator/api/validation.h"
#include "operator/tfjob/convert.h"

namespace lockstep::tfjob {
namespace {

using nlohmann::json;

constexpr std::string_view kTrainingOperator = "kubeflow.org/training-operator";
constexpr std::string_view kContainerName = "tensorflow";  // TFJobDefaultContainerName

bool IsMasterKey(std::string_view key) {
  if (key.size() != 6) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(key[i])) != "master"[i]) return false;
  }
  return true;
}

// The TFJob webhook's checks that the TrainingJob's own validation does not make: each replica
// type's containers, their images, and one named "tensorflow" (TF_CONFIG's container).
void CheckContainers(const json& replicas, api::FieldErrors* errors) {
  if (!replicas.is_object()) return;
  for (const auto& [type, rs] : replicas.items()) {
    const api::FieldPath path = api::FieldPath("spec.tfReplicaSpecs")
                                    .Child(type)
                                    .Child("template")
                                    .Child("spec")
                                    .Child("containers");
    const json* tmpl = rs.is_object() ? api::ObjectAt(rs, "template") : nullptr;
    const json* spec = tmpl ? api::ObjectAt(*tmpl, "spec") : nullptr;
    auto containers = spec ? spec->find("containers") : json::const_iterator();
    if (spec == nullptr || containers == spec->end() || !containers->is_array() ||
        containers->empty()) {
      errors->push_back(api::Required(path, "must be specified"));
      continue;
    }
    bool named = false;
    for (size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      if (api::StringAt(c, "image").empty()) {
        errors->push_back(api::Required(path.Index(i).Child("image"), "must be required"));
      }
      named = named || api::StringAt(c, "name") == kContainerName;
    }
    if (!named) {
      errors->push_back(
          api::Required(path, StrCat("must have at least one container with name ", kContainerName,
                                     " (the one TF_CONFIG is given to)")));
    }
  }
}

// A conversion's "spec.tfReplicaSpecs.X: what" as a field error.
api::FieldError ConversionError(const absl::Status& s) {
  const std::string m(s.message());
  const size_t colon = m.find(": ");
  if (colon == std::string::npos) return api::Invalid(api::FieldPath("spec"), "", m);
  return api::Invalid(api::FieldPath(m.substr(0, colon)), "", m.substr(colon + 2));
}

// The TrainingJob's field paths as the TFJob spells them.
std::string TfJobPath(std::string path, bool master) {
  constexpr std::string_view kFrom = "spec.replicaSpecs";
  if (path.starts_with(kFrom)) {
    path = StrCat("spec.tfReplicaSpecs", path.substr(kFrom.size()));
    if (master && path.starts_with("spec.tfReplicaSpecs.Chief")) {
      path = StrCat("spec.tfReplicaSpecs.Master", path.substr(25));
    }
  }
  return path;
}

}  // namespace

bool ManagedHere(std::string_view managed_by) {
  return managed_by.empty() || managed_by == kTrainingOperator;
}

api::TrainingJob DecodeServedTfJob(const json& j, api::FieldErrors* errors) {
  api::TfJobForm form;
  const json* spec = j.is_object() ? api::ObjectAt(j, "spec") : nullptr;
  const json* replicas = spec ? api::ObjectAt(*spec, "tfReplicaSpecs") : nullptr;
  const json* run = spec ? api::ObjectAt(*spec, "runPolicy") : nullptr;
  if (replicas != nullptr) {
    for (const auto& [key, rs] : replicas->items()) form.master = form.master || IsMasterKey(key);
  }
  if (spec != nullptr) {
    auto dynamic = spec->find("enableDynamicWorker");
    form.dynamic_worker = dynamic != spec->end() && dynamic->is_boolean() && dynamic->get<bool>();
  }
  const std::string managed_by = run ? api::StringAt(*run, "managedBy") : "";
  if (!ManagedHere(managed_by)) form.managed_elsewhere = managed_by;
  const bool backoff_unset = run == nullptr || !run->contains("backoffLimit");

  api::FieldErrors found;
  json doc;
  bool converted = false;
  if (absl::StatusOr<Converted> c = Convert(j, Target::kTrainingJob); c.ok()) {
    doc = std::move(c->doc);
    converted = true;
    if (replicas != nullptr) CheckContainers(*replicas, &found);
  } else {
    found.push_back(ConversionError(c.status()));
    doc = {{"apiVersion", api::kApiVersion}, {"kind", api::kKind}, {"spec", json::object()}};
    if (j.is_object() && j.contains("metadata")) doc["metadata"] = j["metadata"];
  }
  // The status as the operator wrote it: replicaStatuses keyed by the TFJob's types.
  if (const json* status = j.is_object() ? api::ObjectAt(j, "status") : nullptr) {
    json s = *status;
    if (json* rs = s.contains("replicaStatuses") && s["replicaStatuses"].is_object()
                       ? &s["replicaStatuses"]
                       : nullptr;
        rs != nullptr && rs->contains("Master") && !rs->contains("Chief")) {
      (*rs)["Chief"] = std::move((*rs)["Master"]);
      rs->erase("Master");
    }
    if (s.contains("conditions") && s["conditions"].is_array()) {
      for (json& c : s["conditions"]) {
        if (c.is_object()) c.erase("lastUpdateTime");
      }
    }
    doc["status"] = std::move(s);
  }
  api::FieldErrors decode_errors;
  api::TrainingJob job =
      api::DecodeTrainingJob(doc, &decode_errors, {.reject_unknown_fields = false});
  const bool decoded = converted && decode_errors.empty();
  for (api::FieldError& e : decode_errors) {
    e.path = TfJobPath(std::move(e.path), form.master);
    found.push_back(std::move(e));
  }
  if (job.status && !(doc.contains("status") && doc["status"].contains("state"))) {
    // Kubeflow's own CRD prunes status.state (and the rest of the operator's fields): the
    // conditions say it, so a finished job stays finished.
    job.status->state = api::StateOf(job.status->conditions);
  }
  job.api_version = api::kTfJobApiVersion;
  job.kind = api::kTfJobKind;
  if (backoff_unset) job.spec.run_policy.backoff_limit = std::numeric_limits<int32_t>::max();
  job.tfjob = form;
  if (decoded) {
    for (api::FieldError& e : api::ValidateTrainingJob(job)) {
      e.path = TfJobPath(std::move(e.path), form.master);
      found.push_back(std::move(e));
    }
  }
  errors->insert(errors->end(), found.begin(), found.end());
  return job;
}

json EncodeServedTfJobStatus(const api::TrainingJob& job, const api::TrainingJobStatus& status) {
  json s = api::EncodeTrainingJobStatus(status);
  if (s.contains("conditions") && s["conditions"].is_array()) {
    for (json& c : s["conditions"]) {
      if (c.contains("lastTransitionTime")) c["lastUpdateTime"] = c["lastTransitionTime"];
    }
    // training-operator moves the condition it sets to the end, and TFJob's State column is
    // the last condition's type: in order of change, a True one after a False one set with it.
    std::vector<json> conditions = s["conditions"].get<std::vector<json>>();
    std::stable_sort(conditions.begin(), conditions.end(), [](const json& a, const json& b) {
      const std::string ta = api::StringAt(a, "lastTransitionTime");
      const std::string tb = api::StringAt(b, "lastTransitionTime");
      if (ta != tb) return ta < tb;
      return api::StringAt(a, "status") != "True" && api::StringAt(b, "status") == "True";
    });
    s["conditions"] = conditions;
  }
  if (job.tfjob && job.tfjob->master && s.contains("replicaStatuses") &&
      s["replicaStatuses"].contains("Chief")) {
    s["replicaStatuses"]["Master"] = std::move(s["replicaStatuses"]["Chief"]);
    s["replicaStatuses"].erase("Chief");
  }
  return s;
}

}  // namespace lockstep::tfjob
