#include "operator/tfjob/convert.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string_view>

#include "common/str_util.h"
#include "operator/api/trainingjob_types.h"

namespace lockstep::tfjob {
namespace {

using nlohmann::json;

constexpr std::string_view kV1 = "kubeflow.org/v1";
constexpr std::array<std::string_view, 5> kTypes = {"Chief", "Master", "Worker", "PS", "Evaluator"};
// The run-policy fields that versions before 2020 kept directly under spec.
constexpr std::array<std::string_view, 4> kFlatRunPolicy = {
    "cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"};

absl::Status Bad(std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(path, ": ", what));
}

std::string StringAt(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto f = j.find(key);
  return f != j.end() && f->is_string() ? f->get<std::string>() : "";
}

bool SameIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The canonical name of a replica type key, matched as training-operator does (ignoring case).
std::optional<std::string> Canonical(std::string_view key) {
  for (std::string_view t : kTypes) {
    if (SameIgnoringCase(key, t)) return std::string(t);
  }
  return std::nullopt;
}

class Conversion {
 public:
  explicit Conversion(const json& doc) : doc_(doc) {}

  absl::StatusOr<Converted> Run(Target to) {
    if (!doc_.contains("spec") || !doc_["spec"].is_object()) return Bad("spec", "want an object");
    const std::string from = StringAt(doc_, "apiVersion");
    if (doc_.contains("status")) {
      doc_.erase("status");
      Say("status dropped (the output of kubectl get; the server writes it)");
    }
    json& spec = doc_["spec"];
    if (spec.contains("runPolicy") && !spec["runPolicy"].is_object()) {
      return Bad("spec.runPolicy", "want an object");
    }
    if (spec.contains("replica_specs") && !spec.contains("replicaSpecs")) {
      spec["replicaSpecs"] = std::move(spec["replica_specs"]);
      spec.erase("replica_specs");
      Say("spec.replica_specs (v1alpha1's first spelling) read as spec.replicaSpecs");
    }
    if (spec.contains("replicaSpecs") && spec["replicaSpecs"].is_array()) {
      if (absl::Status s = FromListForm(spec); !s.ok()) return s;
    }
    MoveFlatRunPolicy(spec);
    if (absl::Status s = CanonicalKeys(spec); !s.ok()) return s;
    DropUnknown(spec);
    if (from != kV1) {
      WriteOldDefaults(spec, from);
      NameTheTensorflowContainer(spec);
      Say(StrCat("apiVersion ", from.empty() ? "(none)" : from, " -> ", kV1));
      doc_["apiVersion"] = kV1;
    }
    if (to == Target::kTrainingJob) {
      if (absl::Status s = ToTrainingJob(spec); !s.ok()) return s;
    }
    return Converted{.doc = std::move(doc_), .changes = std::move(changes_)};
  }

 private:
  void Say(std::string change) { changes_.push_back(std::move(change)); }

  json& RunPolicy(json& spec) {
    if (!spec.contains("runPolicy") || !spec["runPolicy"].is_object()) {
      spec["runPolicy"] = json::object();
    }
    return spec["runPolicy"];
  }

  // v1alpha1: the list of replica specs, each naming its type, becomes v1's map.
  absl::Status FromListForm(json& spec) {
    json map = json::object();
    const json list = spec["replicaSpecs"];
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = StrCat("spec.replicaSpecs[", i, "]");
      const json& r = list[i];
      if (!r.is_object()) return Bad(path, "want an object");
      std::string type = StringAt(r, "tfReplicaType");
      if (type.empty()) type = "MASTER";  // v1alpha1's default
      std::optional<std::string> canonical = Canonical(type);
      if (!canonical) {
        return Bad(path + ".tfReplicaType", StrCat("\"", type, "\" is not MASTER, WORKER or PS"));
      }
      if (map.contains(*canonical)) return Bad(path, StrCat("a second ", type, " replica spec"));
      json rs = json::object();
      rs["replicas"] = r.contains("replicas") ? r["replicas"] : json(1);
      if (r.contains("template")) rs["template"] = r["template"];
      if (r.contains("tfPort")) SetPort(rs, r["tfPort"], *canonical);
      // The pod's own restart policy was what v1alpha1 ran with; v1 sets it from the replica's.
      if (rs.contains("template") && rs["template"].is_object() &&
          rs["template"].contains("spec") && rs["template"]["spec"].is_object()) {
        const std::string pod_policy = StringAt(rs["template"]["spec"], "restartPolicy");
        if (!pod_policy.empty()) {
          rs["restartPolicy"] = pod_policy;
          Say(StrCat("tfReplicaSpecs.", *canonical, ".restartPolicy ", pod_policy,
                     " from its pod template (v1 sets the pod's from the replica's)"));
        }
      }
      map[*canonical] = std::move(rs);
    }
    spec.erase("replicaSpecs");
    spec["tfReplicaSpecs"] = std::move(map);
    Say("spec.replicaSpecs (a list, by tfReplicaType) -> spec.tfReplicaSpecs (a map by type)");
    if (spec.contains("terminationPolicy")) {
      const json& policy = spec["terminationPolicy"];
      const json chief = policy.is_object() && policy.contains("chief") ? policy["chief"] : json();
      const std::string name = StringAt(chief, "replicaName");
      if (!name.empty() && !SameIgnoringCase(name, "MASTER")) {
        Say(StrCat("spec.terminationPolicy (chief ", name,
                   ") dropped: v1 ends the job with its Chief or Master, else worker 0"));
      } else {
        Say("spec.terminationPolicy dropped: v1 ends the job with its Master, as it named");
      }
      spec.erase("terminationPolicy");
    }
    for (const char* unused : {"tfImage", "RuntimeId"}) {
      if (spec.contains(unused)) {
        spec.erase(unused);
        Say(StrCat("spec.", unused, " dropped (v1 has none; ",
                   std::string_view(unused) == "RuntimeId" ? "pod names are <job>-<type>-<index>)"
                                                           : "the image is the pod template's)"));
      }
    }
    if (spec.contains("schedulerName")) {
      for (auto& [type, rs] : spec["tfReplicaSpecs"].items()) {
        if (!rs.contains("template") || !rs["template"].is_object() ||
            !rs["template"].contains("spec") || !rs["template"]["spec"].is_object()) {
          continue;
        }
        json& pod = rs["template"]["spec"];
        if (!pod.contains("schedulerName")) pod["schedulerName"] = spec["schedulerName"];
      }
      spec.erase("schedulerName");
      Say("spec.schedulerName -> each pod template's spec.schedulerName");
    }
    const std::string clean =
        spec.contains("cleanupPodPolicy") ? StringAt(spec, "cleanupPodPolicy") : "";
    spec.erase("cleanupPodPolicy");
    RunPolicy(spec)["cleanPodPolicy"] = clean.empty() ? "All" : clean;
    Say(StrCat("spec.runPolicy.cleanPodPolicy ", clean.empty() ? "All" : clean,
               clean.empty() ? " (v1alpha1's default)" : " (from spec.cleanupPodPolicy)"));
    return absl::OkStatus();
  }

  // v1alpha1's tfPort: the port named tfjob-port on the replica's tensorflow container.
  void SetPort(json& rs, const json& port, const std::string& type) {
    auto t = rs.find("template");
    if (t == rs.end() || !t->is_object() || !t->contains("spec") || !(*t)["spec"].is_object()) {
      return;
    }
    json& pod = (*t)["spec"];
    if (!pod.contains("containers") || !pod["containers"].is_array() || pod["containers"].empty()) {
      return;
    }
    json& containers = pod["containers"];
    json* c = &containers[0];
    for (json& each : containers) {
      if (StringAt(each, "name") == "tensorflow") c = &each;
    }
    json& ports = (*c)["ports"];
    if (!ports.is_array()) ports = json::array();
    for (const json& p : ports) {
      if (StringAt(p, "name") == "tfjob-port") return;
    }
    ports.push_back({{"name", "tfjob-port"}, {"containerPort", port}});
    Say(StrCat("tfReplicaSpecs.", type, ": tfPort ", port.dump(),
               " -> the container port named tfjob-port"));
  }

  // Before 2020 the run policy's fields sat directly under spec; v1 reads spec.runPolicy.
  void MoveFlatRunPolicy(json& spec) {
    for (std::string_view f : kFlatRunPolicy) {
      const std::string field(f);
      if (!spec.contains(field)) continue;
      json& run = RunPolicy(spec);
      if (run.contains(field) && run[field] != spec[field]) {
        Say(StrCat("spec.", field, " ", spec[field].dump(), " dropped: spec.runPolicy.", field, " ",
                   run[field].dump(), " is set"));
      } else {
        run[field] = spec[field];
        Say(StrCat("spec.", field, " -> spec.runPolicy.", field));
      }
      spec.erase(field);
    }
  }

  absl::Status CanonicalKeys(json& spec) {
    if (!spec.contains("tfReplicaSpecs")) return Bad("spec.tfReplicaSpecs", "Required value");
    if (!spec["tfReplicaSpecs"].is_object()) return Bad("spec.tfReplicaSpecs", "want an object");
    json out = json::object();
    for (auto& [key, rs] : spec["tfReplicaSpecs"].items()) {
      const std::string path = "spec.tfReplicaSpecs." + key;
      if (!rs.is_object()) return Bad(path, "want an object");
      std::optional<std::string> canonical = Canonical(key);
      if (!canonical) {
        return Bad(path,
                   "not a replica type (Chief, Master, Worker, PS or Evaluator, in any case)");
      }
      if (out.contains(*canonical)) {
        return Bad(path, StrCat("a second key for ", *canonical));
      }
      if (*canonical != key) Say(StrCat(path, " -> spec.tfReplicaSpecs.", *canonical));
      json r = rs;
      if (r.contains("tfReplicaType")) {
        r.erase("tfReplicaType");
        Say(StrCat("spec.tfReplicaSpecs.", *canonical, ".tfReplicaType dropped (the key says)"));
      }
      out[*canonical] = std::move(r);
    }
    spec["tfReplicaSpecs"] = std::move(out);
    return absl::OkStatus();
  }

  // Fields no version read, or that v1 dropped (v1alpha1's TensorBoard deployment), which
  // Kubeflow's API server prunes from its structural schema: dropped, said.
  void DropUnknown(json& spec) {
    static constexpr std::array<std::string_view, 5> kV1Fields = {
        "runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker", "managedBy"};
    std::vector<std::string> unknown;
    for (const auto& [key, value] : spec.items()) {
      if (std::find(kV1Fields.begin(), kV1Fields.end(), key) == kV1Fields.end()) {
        unknown.push_back(key);
      }
    }
    for (const std::string& key : unknown) {
      spec.erase(key);
      Say(key == "tensorboard"
              ? "spec.tensorboard dropped: v1 deploys no TensorBoard (run one on the job's log "
                "directory)"
              : StrCat("spec.", key,
                       " dropped: no TFJob version has it (Kubeflow's API server "
                       "prunes it)"));
    }
    // spec.managedBy, as a page of Kubeflow's documentation writes it: v1 reads
    // spec.runPolicy.managedBy.
    if (spec.contains("managedBy")) {
      json& run = RunPolicy(spec);
      if (!run.contains("managedBy")) run["managedBy"] = spec["managedBy"];
      spec.erase("managedBy");
      Say("spec.managedBy -> spec.runPolicy.managedBy");
    }
  }

  // v1 gives TF_CONFIG to the container named "tensorflow" and refuses a replica without one;
  // earlier examples named their only container as they liked. That one is renamed.
  void NameTheTensorflowContainer(json& spec) {
    for (auto& [type, rs] : spec["tfReplicaSpecs"].items()) {
      if (!rs.contains("template") || !rs["template"].is_object()) continue;
      json& tmpl = rs["template"];
      if (!tmpl.contains("spec") || !tmpl["spec"].is_object()) continue;
      json& containers = tmpl["spec"]["containers"];
      if (!containers.is_array() || containers.size() != 1 || !containers[0].is_object()) continue;
      const std::string name = StringAt(containers[0], "name");
      if (name == "tensorflow") continue;
      containers[0]["name"] = "tensorflow";
      Say(StrCat("spec.tfReplicaSpecs.", type, ": its only container \"", name,
                 "\" renamed \"tensorflow\" (v1 gives TF_CONFIG to that one and requires it)"));
    }
  }

  // A default the job's version had and v1 changed: written out.
  void WriteOldDefaults(json& spec, const std::string& from) {
    if (from == "kubeflow.org/v1alpha1") return;  // cleanPodPolicy written from its own rule
    json& run = RunPolicy(spec);
    if (!run.contains("cleanPodPolicy")) {
      run["cleanPodPolicy"] = "Running";
      Say(StrCat("spec.runPolicy.cleanPodPolicy Running (", from, "'s default; v1's is None)"));
    }
  }

  absl::Status ToTrainingJob(json& spec) {
    doc_["apiVersion"] = api::kApiVersion;
    doc_["kind"] = api::kKind;
    json replicas = std::move(spec["tfReplicaSpecs"]);
    spec.erase("tfReplicaSpecs");
    if (replicas.contains("Master")) {
      if (replicas.contains("Chief")) {
        return Bad("spec.tfReplicaSpecs", "both Chief and Master (a job has one chief)");
      }
      replicas["Chief"] = std::move(replicas["Master"]);
      replicas.erase("Master");
      Say("Master -> Chief (a TrainingJob's name for it)");
    }
    bool never = false;
    for (auto& [type, rs] : replicas.items()) {
      if (!rs.contains("restartPolicy")) {
        rs["restartPolicy"] = "Never";
        never = true;
      }
    }
    spec["replicaSpecs"] = std::move(replicas);
    Say(StrCat("kind TFJob -> ", api::kKind, ", spec.tfReplicaSpecs -> spec.replicaSpecs"));
    if (never)
      Say("restartPolicy Never where unset (Kubeflow's default; a TrainingJob's is OnFailure)");
    json& run = RunPolicy(spec);
    if (!run.contains("cleanPodPolicy")) {
      run["cleanPodPolicy"] = "None";
      Say("spec.runPolicy.cleanPodPolicy None (Kubeflow v1's default; a TrainingJob's is Running)");
    }
    if (!run.contains("backoffLimit")) {
      Say(StrCat("spec.runPolicy.backoffLimit unset: a TrainingJob stops after ",
                 api::kDefaultBackoffLimit, " restarts (a TFJob retried without limit)"));
    }
    if (run.contains("managedBy")) {
      run.erase("managedBy");
      Say("spec.runPolicy.managedBy dropped (a TrainingJob is Lockstep's)");
    }
    if (run.contains("schedulingPolicy") && run["schedulingPolicy"].is_object() &&
        run["schedulingPolicy"].contains("minResources")) {
      run["schedulingPolicy"].erase("minResources");
      Say("spec.runPolicy.schedulingPolicy.minResources dropped (the pods' requests say it)");
    }
    if (spec.contains("successPolicy") && StringAt(spec, "successPolicy").empty()) {
      spec.erase("successPolicy");
    }
    if (spec.contains("enableDynamicWorker")) {
      if (spec["enableDynamicWorker"] == true) {
        Say("spec.enableDynamicWorker dropped: a TrainingJob's workers join and leave a running "
            "group with spec.runPolicy.elastic (docs/concepts/elastic.md)");
      }
      spec.erase("enableDynamicWorker");
    }
    return absl::OkStatus();
  }

  json doc_;
  std::vector<std::string> changes_;
};

}  // namespace

bool IsTfJob(const json& doc) { return StringAt(doc, "kind") == "TFJob"; }

absl::StatusOr<Converted> Convert(const json& doc, Target to) {
  if (!IsTfJob(doc)) return Bad("kind", "not a TFJob");
  return Conversion(doc).Run(to);
}

}  // namespace lockstep::tfjob
