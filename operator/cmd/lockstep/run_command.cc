#include "operator/cmd/lockstep/run_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/manifest.h"
#include "operator/api/validation.h"
#include "operator/cmd/lockstep/local_command.h"
#include "operator/kube/api_error.h"
#include "operator/kube/connect.h"
#include "operator/kube/kube_config.h"
#include "operator/kube/rest_client.h"

namespace lockstep::cli {
namespace {

using nlohmann::json;

constexpr char kRunUsage[] =
    R"(usage: lockstep run FILE [--kubeconfig PATH] [--namespace NS] [--timeout SECONDS]

Applies the manifest (its TrainingJobs are validated first; Pods, Services, ConfigMaps,
Secrets and Namespaces are applied too), then follows the first TrainingJob's state until it
ends: exit 0 when it Succeeded, 1 when it Failed or --timeout passed (the job goes on).

Without --kubeconfig or $KUBECONFIG it runs on the local cluster, starting `lockstep local`
when it is not running (state in $LOCKSTEP_HOME, default ~/.lockstep/local).

  --kubeconfig PATH   the cluster to use
  --namespace NS      for documents that name none (default: the kubeconfig's, else default)
  --timeout SECONDS   stop following after this long (default: until the job ends)
)";

// How long a job may go without a status before `lockstep run` asks whether an operator
// runs: the controller writes the first status within a reconcile of the create.
constexpr int64_t kNoStatusHintSeconds = 15;

// The collection a manifest document goes to.
std::optional<kube::Resource> ResourceFor(const json& doc) {
  std::string api_version = api::StringAt(doc, "apiVersion");
  std::string kind = api::StringAt(doc, "kind");
  const kube::Resource* known[] = {&kube::resources::kTrainingJobs, &kube::resources::kPods,
                                   &kube::resources::kServices, &kube::resources::kSecrets,
                                   &kube::resources::kNamespaces};
  for (const kube::Resource* r : known) {
    if (r->ApiVersion() == api_version && r->kind == kind) return *r;
  }
  if (api_version == "v1" && kind == "ConfigMap")
    return kube::Resource{"", "v1", "configmaps", "ConfigMap", true};
  return std::nullopt;
}

std::string Elapsed(std::chrono::steady_clock::time_point start) {
  auto s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
          .count();
  return fmt::format("{:02d}:{:02d}", s / 60, s % 60);
}

// "Running  epoch 2/5 loss 0.41  [Created, Running]" from a TrainingJob's status; a job
// `waited_s` seconds without one is Pending, and past kNoStatusHintSeconds the line says where
// the controller should be.
std::string Describe(const json& job, int64_t waited_s) {
  const json* status = api::ObjectAt(job, "status");
  if (!status) {
    if (waited_s < kNoStatusHintSeconds) return "Pending";
    return StrCat("Pending (no status after ", kNoStatusHintSeconds,
                  " s: is an operator running? `lockstep local status` for the local cluster, "
                  "`kubectl get pods -A -l app.kubernetes.io/name=lockstep` on a cluster)");
  }
  std::string line = api::StringAt(*status, "state");
  if (line.empty()) line = "Pending";
  if (const json* progress = api::ObjectAt(*status, "progress")) {
    std::string summary = api::StringAt(*progress, "summary");
    if (!summary.empty()) line += "  " + summary;
  }
  auto conditions = status->find("conditions");
  if (conditions != status->end() && conditions->is_array()) {
    std::vector<std::string> on;
    for (const json& c : *conditions) {
      if (api::StringAt(c, "status") == "True") on.push_back(api::StringAt(c, "type"));
    }
    if (!on.empty()) line += "  [" + StrJoin(on, ", ") + "]";
  }
  return line;
}

// The reason and message of the condition named `type` when it is true.
std::string ConditionText(const json& job, const std::string& type) {
  const json* status = api::ObjectAt(job, "status");
  auto conditions = status ? status->find("conditions") : job.end();
  if (!status || conditions == status->end() || !conditions->is_array()) return "";
  for (const json& c : *conditions) {
    if (api::StringAt(c, "type") == type && api::StringAt(c, "status") == "True") {
      return StrCat(api::StringAt(c, "reason"), ": ", api::StringAt(c, "message"));
    }
  }
  return "";
}

}  // namespace

int RunRun(const std::vector<std::string>& args, const std::string& self, std::ostream& out,
           std::ostream& err) {
  std::string file, kubeconfig, ns;
  int64_t timeout_s = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out << kRunUsage;
      return 0;
    }
    if ((a == "--kubeconfig" || a == "--namespace" || a == "--timeout") && i + 1 < args.size()) {
      const std::string& v = args[++i];
      if (a == "--kubeconfig") kubeconfig = v;
      if (a == "--namespace") ns = v;
      if (a == "--timeout") {
        char* end = nullptr;
        timeout_s = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || timeout_s <= 0) {
          err << "lockstep run: --timeout " << v
              << ": want a whole number of seconds, such as 600\n";
          return 2;
        }
      }
    } else if (file.empty() && !a.empty() && a[0] != '-') {
      file = a;
    } else {
      err << "lockstep run: unexpected argument \"" << a << "\"\n" << kRunUsage;
      return 2;
    }
  }
  if (file.empty()) {
    err << kRunUsage;
    return 2;
  }
  absl::StatusOr<std::vector<json>> docs = api::ReadManifestFile(file);
  if (!docs.ok()) {
    err << "lockstep run: " << docs.status().message() << "\n";
    return 1;
  }
  // Check every TrainingJob before anything is sent.
  for (const json& doc : *docs) {
    if (api::StringAt(doc, "kind") != "TrainingJob") continue;
    absl::StatusOr<api::TrainingJob> job = api::TrainingJobFromJson(doc);
    if (!job.ok()) {
      err << "lockstep run: " << file << ": " << job.status().message() << "\n";
      return 1;
    }
  }

  // Where to: the named cluster, else the local one (started when it is not running).
  const char* env = std::getenv("KUBECONFIG");
  if (kubeconfig.empty() && !(env && *env)) {
    std::ostringstream quiet;
    if (int rc = RunLocal({"up"}, self, quiet, err); rc != 0) return rc;
    const char* home = std::getenv("LOCKSTEP_HOME");
    const char* user_home = std::getenv("HOME");
    kubeconfig = home && *home
                     ? std::string(home) + "/kubeconfig"
                     : StrCat(user_home ? user_home : "/tmp", "/.lockstep/local/kubeconfig");
  }
  absl::StatusOr<kube::RestConfig> config = kube::DefaultConfig(kubeconfig);
  if (!config.ok()) {
    err << "lockstep run: " << config.status().message() << "\n";
    return 1;
  }
  if (ns.empty()) ns = config->namespace_;
  std::unique_ptr<common::Clock> clock = common::NewRealClock();
  absl::StatusOr<std::shared_ptr<kube::Transport>> transport = kube::Connect(*config, clock.get());
  if (!transport.ok()) {
    err << "lockstep run: " << transport.status().message() << "\n";
    return 1;
  }
  kube::RestClient client(*transport, {.user_agent = "lockstep-run"});

  // Apply: create, or replace what is there.
  std::optional<std::pair<std::string, std::string>> job;  // namespace, name
  for (json doc : *docs) {
    std::optional<kube::Resource> resource = ResourceFor(doc);
    std::string kind = api::StringAt(doc, "kind");
    const json* meta = api::ObjectAt(doc, "metadata");
    std::string name = meta ? api::StringAt(*meta, "name") : "";
    if (!resource) {
      err << "lockstep run: " << file << ": " << kind
          << " is not something lockstep run applies (TrainingJob, Pod, Service, ConfigMap, "
             "Secret, Namespace); use kubectl apply for it\n";
      return 1;
    }
    std::string doc_ns = meta ? api::StringAt(*meta, "namespace") : "";
    if (doc_ns.empty()) doc_ns = ns;
    absl::StatusOr<json> applied = client.Create(*resource, doc_ns, doc);
    if (kube::IsApiAlreadyExists(applied.status())) {
      absl::StatusOr<json> current = client.Get(*resource, doc_ns, name);
      if (current.ok()) {
        doc["metadata"]["resourceVersion"] = (*current)["metadata"]["resourceVersion"];
        applied = client.Update(*resource, doc_ns, doc);
      } else {
        applied = current;
      }
    }
    if (!applied.ok()) {
      err << "lockstep run: " << kind << " " << doc_ns << "/" << name << ": "
          << applied.status().message() << "\n";
      return 1;
    }
    out << kind << " " << doc_ns << "/" << name << " applied\n";
    if (kind == "TrainingJob" && !job) job = {doc_ns, name};
  }
  if (!job) {
    out << "no TrainingJob in " << file << " to follow\n";
    return 0;
  }

  // Follow it until it ends.
  auto start = std::chrono::steady_clock::now();
  bool tty = ::isatty(STDOUT_FILENO);
  std::string last;
  std::string rv;
  while (true) {
    if (timeout_s > 0 &&
        std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_s)) {
      err << "\nlockstep run: gave up after " << timeout_s << " s; the job goes on\n";
      return 1;
    }
    absl::StatusOr<json> current =
        client.Get(kube::resources::kTrainingJobs, job->first, job->second);
    if (!current.ok()) {
      err << "\nlockstep run: " << current.status().message() << "\n";
      return 1;
    }
    const int64_t waited_s =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
            .count();
    std::string line = Describe(*current, waited_s);
    if (line != last) {
      out << (tty ? "\r\033[K" : "") << "[" << Elapsed(start) << "] " << job->second << "  " << line
          << (tty ? "" : "\n") << std::flush;
      last = line;
    }
    std::string state =
        current->contains("status") ? api::StringAt((*current)["status"], "state") : "";
    if (state == "Succeeded") {
      out << (tty ? "\n" : "") << job->second << " succeeded\n";
      return 0;
    }
    if (state == "Failed") {
      out << (tty ? "\n" : "") << job->second << " failed: " << ConditionText(*current, "Failed")
          << "\n";
      return 1;
    }
    // Wait for the next change (or a minute), from the version just read.
    rv = api::StringAt((*current)["metadata"], "resourceVersion");
    absl::StatusOr<std::unique_ptr<kube::WatchStream>> watch =
        client.Watch(kube::resources::kTrainingJobs, job->first,
                     {.field_selector = "metadata.name=" + job->second,
                      .resource_version = rv,
                      // Without a status yet, look again when the hint is due.
                      .timeout_seconds = current->contains("status") ? 60 : kNoStatusHintSeconds});
    if (watch.ok()) {
      (void)(*watch)->Next();  // any event (or the end) means: look again
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

}  // namespace lockstep::cli
