#include "operator/cmd/lockstep/validate_command.h"

#include "operator/api/manifest.h"
#include "operator/api/validation.h"

namespace lockstep::cli {

int RunValidate(const std::vector<std::string>& files, std::ostream& out, std::ostream& err) {
  constexpr char kUsage[] =
      "usage: lockstep validate FILE...\n\n"
      "Checks the TrainingJobs in manifest files (YAML or JSON, several documents each) as the\n"
      "API server and the operator would, without a cluster: every error is named with its\n"
      "field's path. Exit 0 when every job is valid, 1 otherwise.\n";
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
      if (!doc.is_object() || doc.value("kind", "") != api::kKind) continue;
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
