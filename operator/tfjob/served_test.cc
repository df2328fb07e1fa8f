// A served TFJob: read with Kubeflow's defaults, its status written back in TFJob's shape, and
// Kubeflow's own TFJobs (operator/tfjob/testdata/kubeflow) applied unchanged to an API server
// with the TFJob CRD and the TFJob controller, their pods and Services checked against
// training-operator 1.9's rules as written out below (read from its code: GenGeneralName,
// genClusterSpec and genTFConfigJSONStr, GenLabels and IsMasterRole, SetDefaults_TFJob,
// setRestartPolicy), independently of the operator's own code.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/metrics.h"
#include "operator/api/manifest.h"
#include "operator/api/trainingjob_json.h"
#include "operator/api/validation.h"
#include "operator/kube/api_error.h"
#include "operator/kube/rest_client.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/builtin_crds.h"
#include "operator/local/apiserver/local_transport.h"
#include "operator/tfjob/convert.h"
#include "operator/tfjob/served.h"
#include "operator/trainingjob/controller.h"
#include "operator/trainingjob/desired.h"
#include "operator/trainingjob/tf_config.h"

namespace lockstep::tfjob {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace res = kube::resources;

json Yaml(const std::string& text) { return (*api::ParseYamlDocuments(text))[0]; }

const char kMasterJob[] = R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist, namespace: ns, uid: u1, generation: 1}
spec:
  tfReplicaSpecs:
    MASTER:
      template:
        spec:
          containers: [{name: tensorflow, image: tf}]
    worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers: [{name: tensorflow, image: tf, ports: [{name: tfjob-port, containerPort: 3333}]}]
    Evaluator:
      replicas: 0
      template:
        spec:
          containers: [{name: tensorflow, image: tf}]
)";

TEST(ServedTfJobTest, ReadWithKubeflowsDefaults) {
  api::FieldErrors errors;
  api::TrainingJob job = DecodeServedTfJob(Yaml(kMasterJob), &errors);
  ASSERT_TRUE(errors.empty()) << errors.front().ToString();
  EXPECT_EQ(job.kind, "TFJob");
  EXPECT_EQ(job.api_version, "kubeflow.org/v1");
  ASSERT_TRUE(job.tfjob.has_value());
  EXPECT_TRUE(job.tfjob->master);
  EXPECT_FALSE(job.tfjob->dynamic_worker);
  EXPECT_TRUE(job.tfjob->managed_elsewhere.empty());
  const auto& chief = job.spec.replica_specs.at(api::ReplicaType::kChief);
  EXPECT_EQ(chief.replicas, 1);
  EXPECT_EQ(chief.restart_policy, api::RestartPolicy::kNever);  // Kubeflow's default
  EXPECT_EQ(job.spec.replica_specs.at(api::ReplicaType::kWorker).restart_policy,
            api::RestartPolicy::kExitCode);
  EXPECT_EQ(job.spec.run_policy.clean_pod_policy, api::CleanPodPolicy::kNone);
  EXPECT_EQ(job.spec.run_policy.backoff_limit, std::numeric_limits<int32_t>::max());
  EXPECT_EQ(api::ReplicaName(job, api::ReplicaType::kChief, 0), "mnist-master-0");
  EXPECT_EQ(api::ReplicaTypeName(job, api::ReplicaType::kChief), "Master");
}

TEST(ServedTfJobTest, TfConfigIsTrainingOperatorsByteForByte) {
  api::FieldErrors errors;
  api::TrainingJob job = DecodeServedTfJob(Yaml(kMasterJob), &errors);
  ASSERT_TRUE(errors.empty());
  // Every type, one of 0 replicas as an empty list; keys sorted; the worker's own port.
  EXPECT_EQ(*trainingjob::BuildTfConfig(job, api::ReplicaType::kWorker, 1),
            R"({"cluster":{"evaluator":[],"master":["mnist-master-0.ns.svc:2222"],)"
            R"("worker":["mnist-worker-0.ns.svc:3333","mnist-worker-1.ns.svc:3333"]},)"
            R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ(*trainingjob::BuildTfConfig(job, api::ReplicaType::kChief, 0, "cluster.local"),
            R"({"cluster":{"evaluator":[],"master":["mnist-master-0.ns.svc.cluster.local:2222"],)"
            R"("worker":["mnist-worker-0.ns.svc.cluster.local:3333",)"
            R"("mnist-worker-1.ns.svc.cluster.local:3333"]},)"
            R"("task":{"type":"master","index":0},"environment":"cloud"})");
  // enableDynamicWorker: SparseTFConfig, worker then ps, a nil PS list as null.
  job.tfjob->dynamic_worker = true;
  EXPECT_EQ(*trainingjob::BuildTfConfig(job, api::ReplicaType::kWorker, 1),
            R"({"cluster":{"worker":{"1":"mnist-worker-1.ns.svc:3333"},"ps":null},)"
            R"("task":{"type":"worker","index":1}})");
  EXPECT_EQ(*trainingjob::BuildTfConfig(job, api::ReplicaType::kChief, 0),
            R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"master","index":0}})");
}

TEST(ServedTfJobTest, ChildrenCarryTrainingOperatorsLabels) {
  api::FieldErrors errors;
  api::TrainingJob job = DecodeServedTfJob(Yaml(kMasterJob), &errors);
  ASSERT_TRUE(errors.empty());
  json master = trainingjob::DesiredPod(job, api::ReplicaType::kChief, 0, 0, {});
  EXPECT_EQ(master["metadata"]["name"], "mnist-master-0");
  const json& labels = master["metadata"]["labels"];
  EXPECT_EQ(labels["training.kubeflow.org/job-name"], "mnist");
  EXPECT_EQ(labels["training.kubeflow.org/operator-name"], "tfjob-controller");
  EXPECT_EQ(labels["training.kubeflow.org/replica-type"], "master");
  EXPECT_EQ(labels["training.kubeflow.org/replica-index"], "0");
  EXPECT_EQ(labels["training.kubeflow.org/job-role"], "master");
  EXPECT_EQ(master["metadata"]["ownerReferences"][0]["kind"], "TFJob");
  EXPECT_EQ(master["metadata"]["ownerReferences"][0]["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(master["spec"]["containers"][0]["ports"][0]["name"], "tfjob-port");
  json worker = trainingjob::DesiredPod(job, api::ReplicaType::kWorker, 0, 0, {});
  EXPECT_FALSE(worker["metadata"]["labels"].contains("training.kubeflow.org/job-role"));
  EXPECT_EQ(worker["spec"]["restartPolicy"], "Never");  // ExitCode
  // The Service carries the tensorflow container's named ports, tfjob-port first.
  json y = Yaml(kMasterJob);
  y["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["ports"].push_back(
      {{"name", "tensorboard"}, {"containerPort", 6006}});
  y["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["ports"].push_back(
      {{"containerPort", 7000}});  // unnamed: a Service of several ports cannot carry it
  api::FieldErrors errors2;
  api::TrainingJob with_ports = DecodeServedTfJob(y, &errors2);
  ASSERT_TRUE(errors2.empty());
  json svc = trainingjob::DesiredService(with_ports, api::ReplicaType::kWorker, 1);
  ASSERT_EQ(svc["spec"]["ports"].size(), 2u);
  EXPECT_EQ(svc["spec"]["ports"][0]["name"], "tfjob-port");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 3333);
  EXPECT_EQ(svc["spec"]["ports"][1]["name"], "tensorboard");
  // A TFJob's TF_CONFIG goes to the container named tensorflow, even beside a sidecar that
  // declares tfjob-port.
  y["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"]["containers"].insert(
      y["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"]["containers"].begin(),
      json{{"name", "sidecar"},
           {"image", "s"},
           {"ports", {{{"name", "tfjob-port"}, {"containerPort", 9}}}}});
  api::TrainingJob sidecar = DecodeServedTfJob(y, &errors2);
  json pod = trainingjob::DesiredPod(sidecar, api::ReplicaType::kWorker, 0, 0, {});
  for (const json& c : pod["spec"]["containers"]) {
    bool has = false;
    for (const json& e : c.value("env", json::array())) has = has || e["name"] == "TF_CONFIG";
    EXPECT_EQ(has, c["name"] == "tensorflow") << c["name"];
  }
}

// A TrainingJob's template may carry training-operator's job-name label (a manifest moved from
// a TFJob): its pods do not, or the TrainingJob controller's watch would not see them.
TEST(ServedTfJobTest, ATrainingJobsPodsNeverLookLikeATfJobs) {
  api::TrainingJob job = api::TrainingJobFromJson(Yaml(R"(
apiVersion: lockstep.io/v1alpha1
kind: TrainingJob
metadata: {name: t, namespace: ns, uid: u}
spec:
  replicaSpecs:
    Worker:
      replicas: 2
      template:
        metadata: {labels: {training.kubeflow.org/job-name: t, team: a}}
        spec: {containers: [{name: tensorflow, image: tf}]}
)"))
                             .value();
  json pod = trainingjob::DesiredPod(job, api::ReplicaType::kWorker, 0, 0, {});
  EXPECT_FALSE(pod["metadata"]["labels"].contains("training.kubeflow.org/job-name"));
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "a");
}

// Under Kubeflow's own CRD status.state is pruned: the conditions say how the job stands, so a
// finished job stays finished.
TEST(ServedTfJobTest, AStatusWithoutStateIsReadFromItsConditions) {
  json j = Yaml(kMasterJob);
  j["status"] = {
      {"conditions",
       {{{"type", "Created"}, {"status", "True"}, {"lastTransitionTime", "2026-11-29T10:00:00Z"}},
        {{"type", "Running"}, {"status", "False"}, {"lastTransitionTime", "2026-11-29T10:05:00Z"}},
        {{"type", "Succeeded"},
         {"status", "True"},
         {"lastTransitionTime", "2026-11-29T10:05:00Z"}}}}};
  api::FieldErrors errors;
  api::TrainingJob job = DecodeServedTfJob(j, &errors);
  ASSERT_TRUE(job.status.has_value());
  EXPECT_EQ(job.status->state, api::JobState::kSucceeded);
}

TEST(ServedTfJobTest, StatusIsTfJobsShapeAndReadsBackUnchanged) {
  api::FieldErrors errors;
  api::TrainingJob job = DecodeServedTfJob(Yaml(kMasterJob), &errors);
  ASSERT_TRUE(errors.empty());
  api::TrainingJobStatus status;
  status.state = api::JobState::kRunning;
  status.restart_count = 2;
  status.start_time = absl::FromUnixSeconds(1700000000);
  status.conditions.push_back({.type = api::ConditionType::kRunning,
                               .status = api::ConditionStatus::kTrue,
                               .reason = "AllPodsRunning",
                               .message = "m",
                               .last_transition_time = absl::FromUnixSeconds(1700000001),
                               .observed_generation = 1});
  status.replica_statuses[api::ReplicaType::kChief].active = 1;
  status.replica_statuses[api::ReplicaType::kWorker].active = 2;
  json s = EncodeServedTfJobStatus(job, status);
  EXPECT_EQ(s["conditions"][0]["lastUpdateTime"], s["conditions"][0]["lastTransitionTime"]);
  EXPECT_TRUE(s["replicaStatuses"].contains("Master"));
  EXPECT_FALSE(s["replicaStatuses"].contains("Chief"));
  EXPECT_EQ(s["replicaStatuses"]["Master"]["active"], 1);
  // Read back as the controller reads it: the same status, or every reconcile would write.
  json again = Yaml(kMasterJob);
  again["status"] = s;
  api::TrainingJob read = DecodeServedTfJob(again, &errors);
  ASSERT_TRUE(errors.empty()) << errors.front().ToString();
  ASSERT_TRUE(read.status.has_value());
  EXPECT_EQ(*read.status, status);
}

// TFJob's State column is the last condition's type: a resumed job's last is Running, not the
// Suspended condition that went False before it.
TEST(ServedTfJobTest, TheLastConditionIsTheLatestChange) {
  api::FieldErrors errors;
  api::TrainingJob job = DecodeServedTfJob(Yaml(kMasterJob), &errors);
  ASSERT_TRUE(errors.empty());
  api::TrainingJobStatus status;
  auto at = [](int s) { return absl::FromUnixSeconds(1700000000 + s); };
  status.conditions = {{.type = api::ConditionType::kCreated,
                        .status = api::ConditionStatus::kTrue,
                        .last_transition_time = at(0)},
                       {.type = api::ConditionType::kRunning,
                        .status = api::ConditionStatus::kTrue,
                        .last_transition_time = at(20)},
                       {.type = api::ConditionType::kSuspended,
                        .status = api::ConditionStatus::kFalse,
                        .last_transition_time = at(10)},
                       {.type = api::ConditionType::kSucceeded,
                        .status = api::ConditionStatus::kTrue,
                        .last_transition_time = at(30)},
                       {.type = api::ConditionType::kStalled,
                        .status = api::ConditionStatus::kFalse,
                        .last_transition_time = at(30)}};
  json s = EncodeServedTfJobStatus(job, status);
  std::vector<std::string> order;
  for (const json& c : s["conditions"]) order.push_back(c["type"]);
  EXPECT_EQ(order,
            (std::vector<std::string>{"Created", "Suspended", "Running", "Stalled", "Succeeded"}));
  // Read back and written again, the same order: a status that does not change is not written.
  json again = Yaml(kMasterJob);
  again["status"] = s;
  api::TrainingJob read = DecodeServedTfJob(again, &errors);
  EXPECT_EQ(EncodeServedTfJobStatus(read, *read.status), s);
}

TEST(ServedTfJobTest, ProblemsAreNamedAsTheTfJobSpellsThem) {
  json j = Yaml(kMasterJob);
  j["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["name"] = "main";
  j["spec"]["tfReplicaSpecs"]["MASTER"]["replicas"] = 2;
  api::FieldErrors errors;
  DecodeServedTfJob(j, &errors);
  std::string all;
  for (const api::FieldError& e : errors) all += e.ToString() + "\n";
  EXPECT_THAT(all, HasSubstr("spec.tfReplicaSpecs.worker.template.spec.containers: Required "
                             "value: must have at least one container with name tensorflow"));
  EXPECT_THAT(all, HasSubstr("spec.tfReplicaSpecs.Master.replicas"));

  json both = Yaml(kMasterJob);
  both["spec"]["tfReplicaSpecs"]["Chief"] = both["spec"]["tfReplicaSpecs"]["MASTER"];
  errors.clear();
  DecodeServedTfJob(both, &errors);
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0].ToString(), HasSubstr("both Chief and Master"));
}

TEST(ServedTfJobTest, AnotherControllersJobIsLeftAlone) {
  EXPECT_TRUE(ManagedHere(""));
  EXPECT_TRUE(ManagedHere("kubeflow.org/training-operator"));
  EXPECT_FALSE(ManagedHere("kueue.x-k8s.io/multikueue"));
  json j = Yaml(kMasterJob);
  j["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue";
  api::FieldErrors errors;
  api::TrainingJob job = DecodeServedTfJob(j, &errors);
  EXPECT_EQ(job.tfjob->managed_elsewhere, "kueue.x-k8s.io/multikueue");
}

// ---- training-operator's rules, written out for the corpus ----

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Kubeflow's replica type for a key (setTypeNameToCamelCase: EqualFold).
std::string CamelCase(const std::string& key) {
  for (const char* t : {"PS", "Worker", "Chief", "Master", "Evaluator"}) {
    if (Lower(key) == Lower(t)) return t;
  }
  return key;
}

struct KubeflowReplica {
  std::string type;  // camel case
  int replicas = 1;
  int port = 2222;
  std::string restart_policy = "Never";
};

struct KubeflowPod {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string tf_config;  // empty: none
  std::string restart_policy;
  int port = 2222;
};

// What training-operator 1.9 creates for a v1 TFJob: its pods by name.
std::map<std::string, KubeflowPod> KubeflowPods(const json& tfjob) {
  const std::string job = tfjob["metadata"]["name"];
  const std::string ns = tfjob["metadata"].value("namespace", "default");
  std::vector<KubeflowReplica> replicas;
  bool chief_or_master = false;
  int total = 0;
  for (const auto& [key, rs] : tfjob["spec"]["tfReplicaSpecs"].items()) {
    KubeflowReplica r;
    r.type = CamelCase(key);
    if (rs.contains("replicas")) r.replicas = rs["replicas"];
    if (rs.contains("restartPolicy")) r.restart_policy = rs["restartPolicy"];
    if (r.restart_policy == "ExitCode") r.restart_policy = "Never";
    for (const json& c : rs["template"]["spec"]["containers"]) {
      if (c.value("name", "") != "tensorflow" || !c.contains("ports")) continue;
      for (const json& p : c["ports"]) {
        if (p.value("name", "") == "tfjob-port") r.port = p["containerPort"];
      }
    }
    chief_or_master = chief_or_master || r.type == "Chief" || r.type == "Master";
    total += r.replicas;
    replicas.push_back(r);
  }
  // genClusterSpec: map[string][]string, which encoding/json writes with sorted keys.
  std::map<std::string, std::vector<std::string>> cluster;
  for (const KubeflowReplica& r : replicas) {
    std::vector<std::string>& hosts = cluster[Lower(r.type)];
    for (int i = 0; i < r.replicas; ++i) {
      hosts.push_back(job + "-" + Lower(r.type) + "-" + std::to_string(i) + "." + ns +
                      ".svc:" + std::to_string(r.port));
    }
  }
  std::string cluster_json = "{";
  for (const auto& [type, hosts] : cluster) {
    if (cluster_json.size() > 1) cluster_json += ",";
    cluster_json += "\"" + type + "\":[";
    for (size_t i = 0; i < hosts.size(); ++i) {
      cluster_json += (i ? ",\"" : "\"") + hosts[i] + "\"";
    }
    cluster_json += "]";
  }
  cluster_json += "}";
  std::map<std::string, KubeflowPod> pods;
  for (const KubeflowReplica& r : replicas) {
    for (int i = 0; i < r.replicas; ++i) {
      KubeflowPod p;
      const std::string rt = Lower(r.type);
      p.name = job + "-" + rt + "-" + std::to_string(i);
      p.labels = {{"training.kubeflow.org/job-name", job},
                  {"training.kubeflow.org/operator-name", "tfjob-controller"},
                  {"training.kubeflow.org/replica-type", rt},
                  {"training.kubeflow.org/replica-index", std::to_string(i)}};
      const bool master_role = chief_or_master ? (r.type == "Chief" || r.type == "Master")
                                               : (r.type == "Worker" && i == 0);
      if (master_role) p.labels["training.kubeflow.org/job-role"] = "master";
      if (total != 1) {
        p.tf_config = R"({"cluster":)" + cluster_json + R"(,"task":{"type":")" + rt +
                      R"(","index":)" + std::to_string(i) + R"(},"environment":"cloud"})";
      }
      p.restart_policy = r.restart_policy;
      p.port = r.port;
      pods[p.name] = p;
    }
  }
  return pods;
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class ServedCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(Crd()); }
  static json Crd() { return (*api::ParseYamlDocuments(local::TfJobCrdYaml()))[0]; }
  void Start(const json& crd) {
    api_ = *local::ApiServer::Create({});
    ASSERT_TRUE(local::InstallCrd(api_.get(), crd.dump()).ok());
    client_ =
        std::make_unique<kube::RestClient>(std::make_shared<local::LocalTransport>(api_.get()));
    clock_ = common::NewRealClock();
    controller_ = std::make_unique<trainingjob::TrainingJobController>(
        client_.get(), clock_.get(), &metrics_, nullptr,
        trainingjob::ControllerOptions{.tfjobs = true, .workers = 2});
    operator_ = std::jthread([this](std::stop_token stop) { controller_->Run(stop); });
  }
  void TearDown() override { Stop(); }
  void Stop() {
    if (!operator_.joinable()) return;
    operator_.request_stop();
    operator_.join();
  }

  void EnsureNamespace(const std::string& ns) {
    if (namespaces_.insert(ns).second) {
      json n = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}};
      absl::StatusOr<json> r = client_->Create(res::kNamespaces, "", n);
      ASSERT_TRUE(r.ok() || kube::IsApiAlreadyExists(r.status())) << r.status();
    }
  }

  // Polls until `done` holds (the informers and the controller are asynchronous).
  template <typename F>
  bool Eventually(F done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  }

  std::unique_ptr<local::ApiServer> api_;
  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<common::Clock> clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<trainingjob::TrainingJobController> controller_;
  std::jthread operator_;
  std::set<std::string> namespaces_;
};

// Kubeflow's own CRD (ours without the added status fields) prunes what the operator keeps in
// the status: said in an event on the job, with the fix.
TEST_F(ServedCorpusTest, KubeflowsOwnCrdIsNamedAsPruningTheStatus) {
  Stop();
  json crd = Crd();
  json& status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
  for (const char* ours : {"state", "restartCount", "attempt", "countedFailures", "ready"}) {
    status["properties"].erase(ours);
  }
  Start(crd);
  EnsureNamespace("default");
  ASSERT_TRUE(client_
                  ->Create(res::kTfJobs, "default", Yaml(R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: pruned}
spec:
  tfReplicaSpecs:
    Worker: {replicas: 2, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)"))
                  .ok());
  std::string message;
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<json> events = client_->List(res::kEvents, "default", {});
    if (!events.ok()) return false;
    for (const json& e : (*events)["items"]) {
      if (e.value("reason", "") == "StatusPruned") message = e.value("message", "");
    }
    return !message.empty();
  }));
  EXPECT_THAT(message, HasSubstr("apply Lockstep's, crds/kubeflow.org_tfjobs.yaml"));
  // Its pods are made all the same.
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<json> l = client_->List(res::kPods, "default", {});
    return l.ok() && (*l)["items"].size() == 2;
  }));
}

TEST_F(ServedCorpusTest, KubeflowsTfJobsRunUnchangedWithTrainingOperatorsPods) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/operator/tfjob/testdata/kubeflow";
  // What no API server takes as published (ConvertCorpusTest says why each), and the kustomize
  // base of a PS alone, which no operator can train without its overlays' workers.
  const std::map<std::string, std::string> refused = {
      {"004-to-tforg-v1alpha1-readme-status.yaml", "ps-config-volume"},
      {"010-to-v1alpha1-readme-status.yaml", "ps-config-volume"},
      {"041-ex-v1beta2-mnist-base-ps.yaml", "at least one Chief or Worker"},
      {"060-web-v1-legacy-managedby-runpolicy.yaml", "tfReplicaSpecs"},
  };
  int ran_unchanged = 0, ran_converted = 0, refused_checked = 0, pods_checked = 0;
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    std::string text = ReadFile(entry.path());
    // kustomize's $(var), a template's ${NAMESPACE}, Katib's ${trialParameters.x}.
    text = std::regex_replace(text, std::regex(R"(\$\(trainingName\))"), "mnist-train");
    text = std::regex_replace(text, std::regex(R"(\$\{NAMESPACE\})"), "kubeflow");
    text = std::regex_replace(text, std::regex(R"(\$[({][A-Za-z.]+[)}])"), "x");
    json doc = Yaml(text);
    if (!doc.contains("metadata")) doc["metadata"] = json::object();
    // Every file under a name of its own (several examples share one).
    doc["metadata"]["name"] = "c" + file.substr(0, 3);
    doc["metadata"].erase("generateName");
    const bool v1 = doc.value("apiVersion", "") == "kubeflow.org/v1";
    if (!v1) {
      absl::StatusOr<Converted> c = Convert(doc, Target::kTfJobV1);
      if (!c.ok()) {
        ASSERT_TRUE(refused.contains(file)) << c.status();
        EXPECT_THAT(std::string(c.status().message()), HasSubstr(refused.at(file)));
        ++refused_checked;
        continue;
      }
      doc = c->doc;
    }
    doc.erase("status");
    const std::string ns = doc["metadata"].value("namespace", "default");
    const std::string name = doc["metadata"]["name"];
    EnsureNamespace(ns);
    absl::StatusOr<json> created = client_->Create(res::kTfJobs, ns, doc);
    if (!created.ok() && refused.contains(file)) {
      // Refused by the CRD's schema, as Kubeflow's API server refuses it.
      EXPECT_THAT(std::string(created.status().message()), HasSubstr(refused.at(file)));
      ++refused_checked;
      continue;
    }
    ASSERT_TRUE(created.ok()) << created.status();
    if (refused.contains(file)) {
      // Failed, naming the problem.
      std::string message;
      EXPECT_TRUE(Eventually([&] {
        absl::StatusOr<json> j = client_->Get(res::kTfJobs, ns, name);
        if (!j.ok() || !j->contains("status")) return false;
        for (const json& c : (*j)["status"].value("conditions", json::array())) {
          if (c["type"] == "Failed" && c["status"] == "True") {
            message = c.value("message", "");
            return true;
          }
        }
        return false;
      }));
      EXPECT_THAT(message, HasSubstr(refused.at(file)));
      ++refused_checked;
      continue;
    }
    // The pods and Services training-operator would have made, and nothing else.
    const std::map<std::string, KubeflowPod> want = KubeflowPods(*created);
    std::map<std::string, json> pods;
    const bool all_there = Eventually([&] {
      absl::StatusOr<json> l = client_->List(
          res::kPods, ns, {.label_selector = "training.kubeflow.org/job-name=" + name});
      if (!l.ok()) return false;
      pods.clear();
      for (const json& p : (*l)["items"]) pods[p["metadata"]["name"]] = p;
      return pods.size() >= want.size();
    });
    absl::StatusOr<json> job = client_->Get(res::kTfJobs, ns, name);
    ASSERT_TRUE(all_there) << "pods: " << pods.size() << " of " << want.size()
                           << "; status: " << (job.ok() ? (*job)["status"].dump() : "");
    ASSERT_EQ(pods.size(), want.size());
    for (const auto& [pod_name, w] : want) {
      SCOPED_TRACE(pod_name);
      ASSERT_TRUE(pods.contains(pod_name));
      const json& pod = pods[pod_name];
      for (const auto& [k, v] : w.labels) EXPECT_EQ(pod["metadata"]["labels"].value(k, ""), v);
      if (!w.labels.contains("training.kubeflow.org/job-role")) {
        EXPECT_FALSE(pod["metadata"]["labels"].contains("training.kubeflow.org/job-role"));
      }
      EXPECT_EQ(pod["spec"].value("restartPolicy", ""), w.restart_policy);
      std::string tf_config;
      int env_count = 0;
      for (const json& c : pod["spec"]["containers"]) {
        if (c.value("name", "") != "tensorflow") continue;
        for (const json& e : c.value("env", json::array())) {
          if (e.value("name", "") == "TF_CONFIG") {
            tf_config = e.value("value", "");
            ++env_count;
          }
        }
      }
      // Kubeflow appends its TF_CONFIG after one the template sets; the operator keeps the
      // template's (and warns), so a job that sets its own is compared on what it set.
      EXPECT_LE(env_count, 1);
      EXPECT_EQ(tf_config, w.tf_config);
      // Services and pods are created side by side: the pod may be seen first.
      absl::StatusOr<json> svc = absl::NotFoundError("not yet");
      const std::string service = pod_name;  // a structured binding cannot be captured (C++20)
      EXPECT_TRUE(Eventually([&] {
        svc = client_->Get(res::kServices, ns, service);
        return svc.ok();
      }));
      ASSERT_TRUE(svc.ok()) << svc.status();
      EXPECT_EQ((*svc)["spec"]["ports"][0]["port"], w.port);
      EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
      ++pods_checked;
    }
    ASSERT_TRUE(job.ok());
    // Status in TFJob's shape: Created, replicaStatuses by the job's own type names.
    EXPECT_TRUE(Eventually([&] {
      absl::StatusOr<json> j = client_->Get(res::kTfJobs, ns, name);
      return j.ok() && j->contains("status") && (*j)["status"].contains("replicaStatuses") &&
             (*j)["status"]["conditions"][0]["type"] == "Created" &&
             (*j)["status"]["conditions"][0].contains("lastUpdateTime");
    }));
    absl::StatusOr<json> final_job = client_->Get(res::kTfJobs, ns, name);
    for (const auto& [key, rs] : doc["spec"]["tfReplicaSpecs"].items()) {
      EXPECT_TRUE((*final_job)["status"]["replicaStatuses"].contains(CamelCase(key)))
          << (*final_job)["status"]["replicaStatuses"].dump();
    }
    // The job was taken as written: the stored spec is what was applied (the CRD's pruning
    // and defaults aside), never rewritten by the operator.
    EXPECT_EQ((*final_job)["spec"]["tfReplicaSpecs"], (*created)["spec"]["tfReplicaSpecs"]);
    (v1 ? ran_unchanged : ran_converted) += 1;
  }
  std::cout << ran_unchanged << " v1 TFJobs ran unchanged, " << ran_converted
            << " older ones after lockstep convert, " << refused_checked << " refused; "
            << pods_checked << " pods checked against training-operator's rules\n";
  EXPECT_EQ(refused_checked, static_cast<int>(refused.size()));
  // Every v1 TFJob but the page that nests its replicas under runPolicy, and every older one
  // but three no API server takes (operator/tfjob/testdata/kubeflow/README.md).
  EXPECT_EQ(ran_unchanged, 18);
  EXPECT_EQ(ran_converted, 38);
}

}  // namespace
}  // namespace lockstep::tfjob
