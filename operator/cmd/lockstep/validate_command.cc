#include "operator/cmd/lockstep/validate_command.h"

#include "operator/api/manifest.h"
#include "operator/api/validation.h"
#include "operator/tfjob/served.h"

namespace lockstep::cli {
namespace {

// A top-level string field of a manifest document ("" when absent or not a string).
std::string StringField(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object()) return "";
  auto f = doc.find(key);
  return f != doc.end() && f->is_string() ? f->get<std::string>() : "";
}

// A Kubeflow TFJob of a version before v1, which a TrainingJob's fields follow: what to change,
// said instead of "no TrainingJob". Empty for anything else.
std::string TfJobHint(const nlohmann::json& doc) {
  if (StringField(doc, "kind") != "TFJob") return "";
  if (StringField(doc, "apiVersion") == api::kTfJobApiVersion) return "";
  const std::string api_version = StringField(doc, "apiVersion");
  std::string name = "<unnamed>";
  if (auto m = doc.find("metadata"); m != doc.end() && m->is_object()) {
    if (auto n = m->find("name"); n != m->end() && n->is_string()) name = n->get<std::string>();
  }
  std::string hint = "tfjob/" + name + " is a Kubeflow TFJob (" +
                     (api_version.empty() ? std::string("no apiVersion") : api_version) +
                     "), not a TrainingJob: rename apiVersion to lockstep.io/v1alpha1, kind to "
                     "TrainingJob and spec.tfReplicaSpecs to spec.replicaSpecs";
  if (api_version != "kubeflow.org/v1") {
    hint +=
        "; this TFJob version's other fields moved too (v1 keeps cleanPodPolicy, "
        "ttlSecondsAfterFinished, activeDeadlineSeconds and backoffLimit in spec.runPolicy)";
  }
  return hint + "; `lockstep convert` rewrites it (docs/tasks/migrate-from-tfjob.md)";
}

}  // namespace

int RunValidate(const std::vector<std::string>& files, std::ostream& out, std::ostream& err) {
  constexpr char kUsage[] =
      "usage: lockstep validate FILE...\n\n"
      "Checks the TrainingJobs (and Kubeflow kubeflow.org/v1 TFJobs) in manifest files (YAML\n"
      "or JSON, several documents each) as the API server and the operator would, without a\n"
      "cluster: every error is named with its field's path. Exit 0 when every job is valid, 1\n"
      "otherwise.\n";
  for (const std::string& f : files) {
    if (f == "--help" || f == "-h") {
      out << kUsage;
      return 0;
    }
  }
  if (files.empty()) {
    err << "lockstep validate: name at least one manifest file\n" << kUsage;
    return 1;
  }
  int exit_code = 0;
  for (const std::string& file : files) {
    absl::StatusOr<std::vector<nlohmann::json>> docs = api::ReadManifestFile(file);
    if (!docs.ok()) {
      err << "error: " << docs.status().message() << "\n";
      exit_code = 1;
      continue;
    }
    int jobs = 0;
    for (const nlohmann::json& doc : *docs) {
      if (std::string hint = TfJobHint(doc); !hint.empty()) {
        err << file << ": " << hint << "\n";
        exit_code = 1;
        ++jobs;
        continue;
      }
      if (StringField(doc, "kind") == api::kTfJobKind) {
        // kubeflow.org/v1: checked as the operator serves it.
        ++jobs;
        api::FieldErrors errors;
        api::TrainingJob job = tfjob::DecodeServedTfJob(doc, &errors);
        std::string name = job.metadata.name.empty() ? "<unnamed>" : job.metadata.name;
        if (errors.empty()) {
          out << file << ": tfjob/" << name
              << " is a valid Kubeflow TFJob: it runs unchanged where TFJobs are served "
                 "(lockstep local --tfjob, the chart's tfjob.enabled), or as a TrainingJob "
                 "after `lockstep convert`\n";
          continue;
        }
        exit_code = 1;
        err << file << ": tfjob/" << name << " is invalid:\n";
        for (const api::FieldError& e : errors) err << "  " << e.ToString() << "\n";
        continue;
      }
      if (StringField(doc, "kind") != api::kKind) continue;
      ++jobs;
      api::TrainingJob job;
      api::FieldErrors errors = api::CheckTrainingJob(doc, &job);
      std::string name = job.metadata.name.empty() ? "<unnamed>" : job.metadata.name;
      if (errors.empty()) {
        out << file << ": trainingjob/" << name << " is valid\n";
        continue;
      }
      exit_code = 1;
      err << file << ": trainingjob/" << name << " is invalid:\n";
      for (const api::FieldError& e : errors) err << "  " << e.ToString() << "\n";
    }
    if (jobs == 0) {
      err << file << ": no TrainingJob (kind: TrainingJob, apiVersion: lockstep.io/v1alpha1)\n";
      exit_code = 1;
    }
  }
  return exit_code;
}

}  // namespace lockstep::cli
