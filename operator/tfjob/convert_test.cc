// TFJobs of every version brought to kubeflow.org/v1 and to TrainingJobs: the fields each
// version held moved where v1 reads them, the defaults that changed written out, replica type
// keys as training-operator normalises them, and clear errors for what cannot be read.
#include "operator/tfjob/convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "operator/api/manifest.h"
#include "operator/api/validation.h"

namespace lockstep::tfjob {
namespace {

using ::nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;

json Yaml(std::string_view text) {
  absl::StatusOr<std::vector<json>> docs = api::ParseYamlDocuments(text);
  EXPECT_TRUE(docs.ok()) << docs.status();
  return docs.ok() && !docs->empty() ? docs->front() : json();
}

json Pod(std::string_view image = "tensorflow/tensorflow:2.15.0") {
  return {{"spec", {{"containers", {{{"name", "tensorflow"}, {"image", image}}}}}}};
}

// The TrainingJob `c` made is valid as `lockstep validate` reads it.
void ExpectValid(const Converted& c) {
  api::TrainingJob job;
  api::FieldErrors errors = api::CheckTrainingJob(c.doc, &job);
  for (const api::FieldError& e : errors) ADD_FAILURE() << e.ToString() << "\n" << c.doc.dump(2);
}

TEST(ConvertTest, V1Alpha1TheListOfReplicaSpecsBecomesV1sMap) {
  json doc = {
      {"apiVersion", "kubeflow.org/v1alpha1"},
      {"kind", "TFJob"},
      {"metadata", {{"name", "old"}}},
      {"spec",
       {{"RuntimeId", "ab12"},
        {"tfImage", "tensorflow/tensorflow:1.3.0"},
        {"schedulerName", "volcano"},
        {"terminationPolicy", {{"chief", {{"replicaName", "MASTER"}, {"replicaIndex", 0}}}}},
        {"replicaSpecs",
         {{{"replicas", 1}, {"tfReplicaType", "MASTER"}, {"template", Pod()}},
          {{"replicas", 2}, {"tfReplicaType", "WORKER"}, {"tfPort", 2223}, {"template", Pod()}},
          {{"tfReplicaType", "PS"}, {"template", Pod()}}}}}}};
  doc["spec"]["replicaSpecs"][2]["template"]["spec"]["restartPolicy"] = "OnFailure";
  absl::StatusOr<Converted> v1 = Convert(doc, Target::kTfJobV1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  const json& spec = v1->doc["spec"];
  EXPECT_EQ(v1->doc["apiVersion"], "kubeflow.org/v1");
  EXPECT_FALSE(spec.contains("replicaSpecs"));
  EXPECT_EQ(spec["tfReplicaSpecs"]["Master"]["replicas"], 1);
  EXPECT_EQ(spec["tfReplicaSpecs"]["Worker"]["replicas"], 2);
  EXPECT_EQ(spec["tfReplicaSpecs"]["PS"]["replicas"], 1);  // v1alpha1's default
  EXPECT_EQ(spec["tfReplicaSpecs"]["PS"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"],
            json::parse(R"([{"name":"tfjob-port","containerPort":2223}])"));
  EXPECT_EQ(spec["tfReplicaSpecs"]["Master"]["template"]["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(spec["runPolicy"]["cleanPodPolicy"], "All");  // v1alpha1 cleaned every pod
  for (const char* gone : {"RuntimeId", "tfImage", "schedulerName", "terminationPolicy"}) {
    EXPECT_FALSE(spec.contains(gone)) << gone;
  }
  EXPECT_THAT(v1->changes, Contains("spec.runPolicy.cleanPodPolicy All (v1alpha1's default)"));
  EXPECT_THAT(v1->changes, Contains("apiVersion kubeflow.org/v1alpha1 -> kubeflow.org/v1"));

  absl::StatusOr<Converted> job = Convert(doc, Target::kTrainingJob);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->doc["kind"], "TrainingJob");
  EXPECT_TRUE(job->doc["spec"]["replicaSpecs"].contains("Chief"));
  EXPECT_FALSE(job->doc["spec"]["replicaSpecs"].contains("Master"));
  EXPECT_EQ(job->doc["spec"]["replicaSpecs"]["Worker"]["restartPolicy"], "Never");
  EXPECT_EQ(job->doc["spec"]["runPolicy"]["cleanPodPolicy"], "All");
  ExpectValid(*job);
}

TEST(ConvertTest, V1Beta2FlatRunPolicyMovesAndItsDefaultIsWrittenOut) {
  json doc = Yaml(R"(
apiVersion: kubeflow.org/v1beta2
kind: TFJob
metadata: {name: flat}
spec:
  backoffLimit: 4
  activeDeadlineSeconds: 3600
  ttlSecondsAfterFinished: 60
  tfReplicaSpecs:
    worker: {replicas: 2, restartPolicy: OnFailure, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
    Ps: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
)");
  absl::StatusOr<Converted> v1 = Convert(doc, Target::kTfJobV1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  const json& spec = v1->doc["spec"];
  EXPECT_EQ(spec["runPolicy"], json::parse(R"({"backoffLimit":4,"activeDeadlineSeconds":3600,
                            "ttlSecondsAfterFinished":60,"cleanPodPolicy":"Running"})"));
  EXPECT_FALSE(spec.contains("backoffLimit"));
  EXPECT_TRUE(spec["tfReplicaSpecs"].contains("Worker"));
  EXPECT_TRUE(spec["tfReplicaSpecs"].contains("PS"));
  EXPECT_THAT(v1->changes, Contains("spec.backoffLimit -> spec.runPolicy.backoffLimit"));
  EXPECT_THAT(v1->changes, Contains("spec.tfReplicaSpecs.worker -> spec.tfReplicaSpecs.Worker"));
  EXPECT_THAT(v1->changes, Contains("spec.runPolicy.cleanPodPolicy Running (kubeflow.org/"
                                    "v1beta2's default; v1's is None)"));
  // A flat field that disagrees with runPolicy's is dropped, said.
  doc["spec"]["runPolicy"] = {{"backoffLimit", 9}};
  absl::StatusOr<Converted> both = Convert(doc, Target::kTfJobV1);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->doc["spec"]["runPolicy"]["backoffLimit"], 9);
  EXPECT_THAT(both->changes,
              Contains("spec.backoffLimit 4 dropped: spec.runPolicy.backoffLimit 9 is set"));
  absl::StatusOr<Converted> job = Convert(doc, Target::kTrainingJob);
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectValid(*job);
}

TEST(ConvertTest, AV1TfJobStaysAsItIsAndBecomesATrainingJobWithKubeflowsDefaults) {
  json doc = Yaml(R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: now, namespace: team}
spec:
  enableDynamicWorker: true
  successPolicy: ""
  runPolicy: {managedBy: kubeflow.org/training-operator, schedulingPolicy: {queue: q, minResources: {cpu: "4"}}}
  tfReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
    Worker: {replicas: 2, restartPolicy: ExitCode, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
)");
  absl::StatusOr<Converted> same = Convert(doc, Target::kTfJobV1);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->doc, doc);
  EXPECT_TRUE(same->changes.empty());

  absl::StatusOr<Converted> job = Convert(doc, Target::kTrainingJob);
  ASSERT_TRUE(job.ok()) << job.status();
  const json& spec = job->doc["spec"];
  EXPECT_EQ(job->doc["apiVersion"], "lockstep.io/v1alpha1");
  EXPECT_EQ(job->doc["metadata"]["namespace"], "team");
  EXPECT_EQ(spec["replicaSpecs"]["Chief"]["restartPolicy"], "Never");  // Kubeflow's default
  EXPECT_EQ(spec["replicaSpecs"]["Worker"]["restartPolicy"], "ExitCode");
  EXPECT_EQ(spec["runPolicy"]["cleanPodPolicy"], "None");
  EXPECT_EQ(spec["runPolicy"]["schedulingPolicy"], json::parse(R"({"queue":"q"})"));
  for (const char* gone : {"enableDynamicWorker", "successPolicy", "tfReplicaSpecs"}) {
    EXPECT_FALSE(spec.contains(gone)) << gone;
  }
  EXPECT_FALSE(spec["runPolicy"].contains("managedBy"));
  EXPECT_THAT(job->changes, Contains(HasSubstr("spec.enableDynamicWorker dropped")));
  EXPECT_THAT(job->changes, Contains(HasSubstr("backoffLimit unset: a TrainingJob stops after 6")));
  ExpectValid(*job);
}

// The shipped example is Kubeflow's dist-mnist TFJob renamed by hand: converting the TFJob gives
// the example itself.
TEST(ConvertTest, TheExampleIsWhatConvertingItsTfJobGives) {
  absl::StatusOr<std::vector<json>> docs =
      api::ReadManifestFile(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/kubeflow-tfjob.yaml");
  ASSERT_TRUE(docs.ok()) << docs.status();
  const json example = docs->front();
  json tfjob = example;
  tfjob["apiVersion"] = "kubeflow.org/v1";
  tfjob["kind"] = "TFJob";
  tfjob["spec"]["tfReplicaSpecs"] = tfjob["spec"]["replicaSpecs"];
  tfjob["spec"].erase("replicaSpecs");
  absl::StatusOr<Converted> job = Convert(tfjob, Target::kTrainingJob);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->doc, example);
}

TEST(ConvertTest, WhatCannotBeReadIsNamed) {
  struct Case {
    std::string yaml, want;
  };
  const std::vector<Case> cases = {
      {"kind: TFJob\nspec: 3\n", "spec: want an object"},
      {"kind: TFJob\nspec: {}\n", "spec.tfReplicaSpecs: Required value"},
      {"kind: TFJob\nspec: {tfReplicaSpecs: [1]}\n", "spec.tfReplicaSpecs: want an object"},
      {"kind: TFJob\nspec: {tfReplicaSpecs: {Worker: 2}}\n",
       "spec.tfReplicaSpecs.Worker: want an object"},
      {"kind: TFJob\nspec: {tfReplicaSpecs: {Trainer: {}}}\n",
       "spec.tfReplicaSpecs.Trainer: not a replica type"},
      {"kind: TFJob\nspec: {tfReplicaSpecs: {worker: {}, WORKER: {}}}\n",
       "a second key for Worker"},
      {"kind: TFJob\nspec: {replicaSpecs: [{tfReplicaType: GPU}]}\n",
       "spec.replicaSpecs[0].tfReplicaType: \"GPU\" is not MASTER, WORKER or PS"},
      {"kind: TFJob\nspec: {replicaSpecs: [{tfReplicaType: PS}, {tfReplicaType: ps}]}\n",
       "spec.replicaSpecs[1]: a second ps replica spec"},
      {"kind: TFJob\nspec: {replicaSpecs: [7]}\n", "spec.replicaSpecs[0]: want an object"},
      {"kind: TFJob\nspec: {runPolicy: 5, backoffLimit: 2, tfReplicaSpecs: {}}\n",
       "spec.runPolicy: want an object"},
      {"kind: TFJob\nspec: {replicaSpecs: [{}], terminationPolicy: 5}\n", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    absl::StatusOr<Converted> v1 = Convert(Yaml(c.yaml), Target::kTfJobV1);
    if (c.want.empty()) {
      EXPECT_TRUE(v1.ok()) << v1.status();
      continue;
    }
    ASSERT_FALSE(v1.ok());
    EXPECT_THAT(std::string(v1.status().message()), HasSubstr(c.want));
  }
  absl::StatusOr<Converted> two = Convert(
      Yaml("kind: TFJob\nspec: {tfReplicaSpecs: {Chief: {}, Master: {}}}\n"), Target::kTrainingJob);
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(std::string(two.status().message()), HasSubstr("both Chief and Master"));
  EXPECT_FALSE(Convert(json{{"kind", "TrainingJob"}}, Target::kTfJobV1).ok());
  EXPECT_FALSE(IsTfJob(json::array()));
}

// Sixty TFJobs from Kubeflow's own repositories, every version, as published (testdata/kubeflow,
// with their provenance). Placeholders are filled as kustomize and Katib fill them; then every
// one converts to a valid TrainingJob keeping its replica types and counts, except the four
// that no API server would take as published, each refused for its own reason.
TEST(ConvertCorpusTest, KubeflowsTfJobsOfEveryVersionBecomeValidTrainingJobs) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/operator/tfjob/testdata/kubeflow";
  const std::map<std::string, std::string> refused = {
      // A README's PS mounts a volume its pod template does not define.
      {"004-to-tforg-v1alpha1-readme-status.yaml", "Not found: \"ps-config-volume\""},
      {"010-to-v1alpha1-readme-status.yaml", "Not found: \"ps-config-volume\""},
      // A kustomize base with a PS only: its overlays add the workers.
      {"041-ex-v1beta2-mnist-base-ps.yaml", "at least one Chief or Worker"},
      // A documentation page nests tfReplicaSpecs under runPolicy.
      {"060-web-v1-legacy-managedby-runpolicy.yaml", "spec.tfReplicaSpecs: Required value"},
  };
  std::map<std::string, int> versions;
  int converted = 0, checked_refusals = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    std::ifstream in(entry.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // kustomize's $(var), a template's ${NAMESPACE}, Katib's ${trialParameters.x}.
    text = std::regex_replace(text, std::regex(R"(\$\(trainingName\))"), "mnist-train");
    text = std::regex_replace(text, std::regex(R"(\$\{NAMESPACE\})"), "kubeflow");
    text = std::regex_replace(text, std::regex(R"(\$[({][A-Za-z.]+[)}])"), "x");
    absl::StatusOr<std::vector<json>> docs = api::ParseYamlDocuments(text);
    ASSERT_TRUE(docs.ok()) << docs.status();
    ASSERT_EQ(docs->size(), 1u);
    json doc = docs->front();
    ASSERT_TRUE(IsTfJob(doc));
    ++versions[doc.value("apiVersion", "")];
    // A Katib trial's TFJob gets its name from the trial.
    if (!doc.contains("metadata")) doc["metadata"] = {{"name", "katib-trial"}};
    absl::StatusOr<Converted> job = Convert(doc, Target::kTrainingJob);
    std::string problem;
    if (!job.ok()) {
      problem = job.status().ToString();
    } else {
      api::TrainingJob decoded;
      for (const api::FieldError& e : api::CheckTrainingJob(job->doc, &decoded)) {
        problem += e.ToString() + "; ";
      }
    }
    if (auto r = refused.find(file); r != refused.end()) {
      EXPECT_THAT(problem, HasSubstr(r->second));
      ++checked_refusals;
      continue;
    }
    ASSERT_EQ(problem, "") << (job.ok() ? job->doc.dump(2) : "");
    // Every replica type and count kept (Master -> Chief; v1alpha1's unnamed type is MASTER).
    std::map<std::string, int64_t> before, after;
    const json& spec = doc["spec"];
    const json& old = spec.contains("tfReplicaSpecs") ? spec["tfReplicaSpecs"]
                      : spec.contains("replicaSpecs") ? spec["replicaSpecs"]
                                                      : spec["replica_specs"];
    for (const auto& [key, r] : old.items()) {
      std::string type = old.is_array() ? r.value("tfReplicaType", "MASTER") : key;
      for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (type == "master") type = "chief";
      before[type] += r.value("replicas", int64_t{1});
    }
    for (const auto& [key, r] : job->doc["spec"]["replicaSpecs"].items()) {
      std::string type = key;
      for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      after[type] += r.value("replicas", int64_t{1});
    }
    EXPECT_EQ(after, before);
    ++converted;
  }
  EXPECT_EQ(checked_refusals, static_cast<int>(refused.size()));
  EXPECT_EQ(converted, 56);
  EXPECT_EQ(versions.size(), 6u);  // tensorflow.org/v1alpha1, kubeflow.org/v1alpha1 .. v1
}

}  // namespace
}  // namespace lockstep::tfjob
