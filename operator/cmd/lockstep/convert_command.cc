#include "operator/cmd/lockstep/convert_command.h"

#include "operator/api/manifest.h"
#include "operator/api/validation.h"
#include "operator/tfjob/convert.h"

namespace lockstep::cli {

int RunConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  constexpr char kUsage[] =
      "usage: lockstep convert [--to=TrainingJob|v1] FILE...\n\n"
      "Rewrites Kubeflow TFJob manifests of any version (kubeflow.org/v1alpha1 to v1) as\n"
      "TrainingJobs (the default) or as kubeflow.org/v1 TFJobs: YAML on stdout, every change on\n"
      "stderr. Other documents pass through unchanged. Exit 0 when every file converted, 1\n"
      "otherwise (a TrainingJob made is also validated), 2 for bad arguments.\n";
  tfjob::Target to = tfjob::Target::kTrainingJob;
  std::vector<std::string> files;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      out << kUsage;
      return 0;
    }
    if (a == "--to=TrainingJob") {
      to = tfjob::Target::kTrainingJob;
    } else if (a == "--to=v1") {
      to = tfjob::Target::kTfJobV1;
    } else if (a.starts_with("-")) {
      err << "lockstep convert: unknown argument \"" << a << "\" (--to=TrainingJob or --to=v1)\n";
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    err << "lockstep convert: name at least one manifest file\n" << kUsage;
    return 2;
  }
  int exit_code = 0;
  bool first = true;
  for (const std::string& file : files) {
    absl::StatusOr<std::vector<nlohmann::json>> docs = api::ReadManifestFile(file);
    if (!docs.ok()) {
      err << "error: " << docs.status().message() << "\n";
      exit_code = 1;
      continue;
    }
    for (const nlohmann::json& doc : *docs) {
      nlohmann::json result = doc;
      if (tfjob::IsTfJob(doc)) {
        const nlohmann::json* name = doc.contains("metadata") && doc["metadata"].is_object() &&
                                             doc["metadata"].contains("name") &&
                                             doc["metadata"]["name"].is_string()
                                         ? &doc["metadata"]["name"]
                                         : nullptr;
        const std::string what =
            file + ": tfjob/" + (name != nullptr ? name->get<std::string>() : "<unnamed>");
        absl::StatusOr<tfjob::Converted> c = tfjob::Convert(doc, to);
        if (!c.ok()) {
          err << what << " cannot be converted: " << c.status().message() << "\n";
          exit_code = 1;
          continue;
        }
        for (const std::string& change : c->changes) err << what << ": " << change << "\n";
        if (to == tfjob::Target::kTrainingJob) {
          api::TrainingJob job;
          api::FieldErrors errors = api::CheckTrainingJob(c->doc, &job);
          if (!errors.empty()) {
            exit_code = 1;
            err << what << ": the TrainingJob made is invalid:\n";
            for (const api::FieldError& e : errors) err << "  " << e.ToString() << "\n";
          }
        }
        result = std::move(c->doc);
      }
      if (!first) out << "---\n";
      first = false;
      out << api::ToYaml(result);
    }
  }
  return exit_code;
}

}  // namespace lockstep::cli
