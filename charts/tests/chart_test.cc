// The Helm chart rendered by lockstep-chart-render (text/template + sprig, as Helm renders it),
// with default values and with tests/values-custom.yaml: what objects it makes, their labels,
// the Deployment's hardening, the RBAC's shape, that lockstep-operator accepts the rendered
// flags, and that bad values are refused with their names. What the RBAC must contain is
// checked against the operator's real calls by e2e_chart.

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "charts/tests/chart_render.h"
#include "operator/api/manifest.h"
#include "operator/api/trainingjob_types.h"
#include "operator/cmd/lockstep-operator/operator_flags.h"

namespace lockstep::chart_test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::multiset<std::string> Kinds(const std::vector<json>& objs) {
  std::multiset<std::string> kinds;
  for (const json& o : objs) kinds.insert(o.value("kind", ""));
  return kinds;
}

std::vector<std::string> Args(const json& deployment) {
  std::vector<std::string> args;
  for (const json& a : deployment["spec"]["template"]["spec"]["containers"][0]["args"]) {
    args.push_back(a.get<std::string>());
  }
  return args;
}

// Every rule of a Role or ClusterRole as "group resource verb" strings.
std::set<std::string> Permissions(const json& role) {
  std::set<std::string> out;
  for (const json& rule : role["rules"]) {
    for (const json& g : rule["apiGroups"]) {
      for (const json& r : rule["resources"]) {
        for (const json& v : rule["verbs"]) {
          out.insert(g.get<std::string>() + " " + r.get<std::string>() + " " +
                     v.get<std::string>());
        }
      }
    }
  }
  return out;
}

std::string AppVersion() {
  absl::StatusOr<std::vector<json>> chart =
      lockstep::api::ParseYamlDocuments(ReadFile(kChart + "/Chart.yaml"));
  return chart.ok() && !chart->empty() ? (*chart)[0].value("appVersion", "") : "";
}

TEST(ChartTest, CrdsAreByteIdenticalToTheOnesInCrds) {
  for (const char* file : {"lockstep.io_trainingjobs.yaml", "kubeflow.org_tfjobs.yaml"}) {
    SCOPED_TRACE(file);
    std::string chart_crd = ReadFile(kChart + "/crds/" + file);
    std::string crd = ReadFile(std::string(LOCKSTEP_SOURCE_DIR) + "/crds/" + file);
    ASSERT_FALSE(crd.empty());
    EXPECT_TRUE(chart_crd == crd) << "charts/lockstep/crds/ differs from crds/: copy crds/" << file;
  }
  // Only those two: Helm installs everything in crds/.
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(kChart + "/crds")) ++files;
  EXPECT_EQ(files, 2);
}

TEST(ChartTest, IncludeCrdsPutsTheCrdsFirst) {
  std::vector<json> objs = Objects("--include-crds " + kChart);
  ASSERT_FALSE(objs.empty());
  ASSERT_GE(objs.size(), 2u);
  std::set<std::string> crds;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(objs[i].value("kind", ""), "CustomResourceDefinition");
    crds.insert(objs[i]["metadata"].value("name", ""));
  }
  EXPECT_EQ(crds, (std::set<std::string>{"trainingjobs.lockstep.io", "tfjobs.kubeflow.org"}));
}

TEST(ChartTest, DefaultsRenderTheOperatorAndItsRbac) {
  std::vector<json> objs = Objects("--name lockstep --namespace lockstep-system " + kChart);
  EXPECT_EQ(Kinds(objs), (std::multiset<std::string>{"PodDisruptionBudget", "ServiceAccount",
                                                     "ClusterRole", "ClusterRoleBinding", "Role",
                                                     "RoleBinding", "Service", "Deployment"}));
  // Helm's install order: the account and its rights before the pods that use them.
  std::vector<std::string> order;
  for (const json& o : objs) order.push_back(o.value("kind", ""));
  EXPECT_LT(std::find(order.begin(), order.end(), "ServiceAccount") - order.begin(),
            std::find(order.begin(), order.end(), "Deployment") - order.begin());
}

TEST(ChartTest, EveryObjectHasTheStandardLabels) {
  for (const std::string& values : {std::string(), "-f " + kCustom}) {
    std::vector<json> objs = Objects("--name ml --namespace ops " + values + " " + kChart);
    ASSERT_FALSE(objs.empty());
    for (const json& o : objs) {
      SCOPED_TRACE(o.value("kind", "") + " " + values);
      const json& labels = o["metadata"]["labels"];
      EXPECT_EQ(labels.value("app.kubernetes.io/name", ""), "lockstep");
      EXPECT_EQ(labels.value("app.kubernetes.io/instance", ""), "ml");
      EXPECT_EQ(labels.value("app.kubernetes.io/version", ""), AppVersion());
      EXPECT_EQ(labels.value("app.kubernetes.io/managed-by", ""), "Helm");
      EXPECT_EQ(labels.value("app.kubernetes.io/part-of", ""), "lockstep");
      EXPECT_EQ(labels.value("app.kubernetes.io/component", ""), "operator");
      EXPECT_EQ(labels.value("helm.sh/chart", ""), "lockstep-0.1.0");
    }
  }
}

TEST(ChartTest, DeploymentIsHardenedAndProbed) {
  std::vector<json> objs = Objects("--name lockstep --namespace lockstep-system " + kChart);
  const json* d = Find(objs, "Deployment");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["metadata"].value("namespace", ""), "lockstep-system");
  EXPECT_EQ((*d)["spec"].value("replicas", 0), 2);
  const json& pod = (*d)["spec"]["template"];
  // The selector selects the template's pods.
  for (const auto& [k, v] : (*d)["spec"]["selector"]["matchLabels"].items()) {
    EXPECT_EQ(pod["metadata"]["labels"].value(k, ""), v.get<std::string>()) << k;
  }
  const json& spec = pod["spec"];
  EXPECT_EQ(spec.value("serviceAccountName", ""), "lockstep");
  EXPECT_EQ(spec["securityContext"].value("runAsNonRoot", false), true);
  EXPECT_GT(spec["securityContext"].value("runAsUser", 0), 0);
  EXPECT_EQ(spec["securityContext"]["seccompProfile"].value("type", ""), "RuntimeDefault");
  ASSERT_EQ(spec["containers"].size(), 1u);
  const json& c = spec["containers"][0];
  EXPECT_EQ(c.value("image", ""), "lockstep/operator:" + AppVersion());
  EXPECT_EQ(c.value("imagePullPolicy", ""), "IfNotPresent");
  const json& sc = c["securityContext"];
  EXPECT_EQ(sc.value("allowPrivilegeEscalation", true), false);
  EXPECT_EQ(sc.value("readOnlyRootFilesystem", false), true);
  EXPECT_EQ(sc.value("privileged", true), false);
  EXPECT_EQ(sc["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_FALSE(sc["capabilities"].contains("add"));
  // Probes on the metrics port, which the container declares.
  EXPECT_EQ(c["livenessProbe"]["httpGet"].value("path", ""), "/healthz");
  EXPECT_EQ(c["readinessProbe"]["httpGet"].value("path", ""), "/readyz");
  EXPECT_EQ(c["livenessProbe"]["httpGet"].value("port", ""), "metrics");
  EXPECT_EQ(c["ports"][0].value("name", ""), "metrics");
  EXPECT_EQ(c["ports"][0].value("containerPort", 0), 8080);
  // Requests and limits for both resources; the memory request covers the measured RSS
  // (12.5-13.9 MiB) and the limit leaves room for larger caches.
  for (const char* r : {"requests", "limits"}) {
    EXPECT_TRUE(c["resources"][r].contains("cpu")) << r;
    EXPECT_TRUE(c["resources"][r].contains("memory")) << r;
  }
  EXPECT_EQ(c["resources"]["requests"].value("memory", ""), "32Mi");
  EXPECT_EQ(c["resources"]["limits"].value("memory", ""), "128Mi");
  // A writable /tmp under a read-only root.
  EXPECT_EQ(c["volumeMounts"][0].value("mountPath", ""), "/tmp");
}

TEST(ChartTest, TheOperatorAcceptsTheRenderedFlags) {
  for (const std::string& values : {std::string(), "-f " + kCustom}) {
    SCOPED_TRACE(values);
    std::vector<json> objs = Objects(values + " " + kChart);
    const json* d = Find(objs, "Deployment");
    ASSERT_NE(d, nullptr);
    std::vector<std::string> args = Args(*d);
    // $(POD_IP) is the kubelet's to expand, from the env the template defines.
    std::set<std::string> env;
    for (const json& e : (*d)["spec"]["template"]["spec"]["containers"][0]["env"]) {
      env.insert(e.value("name", ""));
    }
    for (std::string& a : args) {
      if (size_t at = a.find("$(POD_IP)"); at != std::string::npos) {
        EXPECT_TRUE(env.contains("POD_IP"));
        a.replace(at, 9, "10.0.0.7");
      }
    }
    absl::StatusOr<lockstep::cmd::OperatorFlags> flags = lockstep::cmd::ParseOperatorFlags(args);
    ASSERT_TRUE(flags.ok()) << flags.status();
    EXPECT_TRUE(flags->leader_elect);
    EXPECT_TRUE(env.contains("POD_NAMESPACE"));  // where the Lease goes
    if (values.empty()) {
      EXPECT_EQ(flags->metrics_addr, "10.0.0.7:8080");
      EXPECT_EQ(flags->leader_election_id, "lockstep-operator");
      EXPECT_EQ(flags->namespace_, "");
      EXPECT_TRUE(flags->json_logs);
    } else {
      EXPECT_EQ(flags->metrics_addr, "10.0.0.7:9090");
      EXPECT_EQ(flags->leader_election_id, "lockstep-team-a");
      EXPECT_EQ(flags->namespace_, "team-a");
      EXPECT_EQ(flags->workers, 8);
      EXPECT_EQ(flags->burst, 100);
      EXPECT_EQ(flags->cluster_domain, "cluster.local");
      EXPECT_EQ(flags->gang, lockstep::trainingjob::GangScheduler::kVolcano);
      EXPECT_EQ(flags->progress_interval, absl::Seconds(30));
      EXPECT_FALSE(flags->json_logs);
      EXPECT_EQ(flags->context, "prod");
    }
  }
}

TEST(ChartTest, ClusterWideRbacByDefaultAndLeaseRightsInTheReleaseNamespaceOnly) {
  std::vector<json> objs = Objects("--name lockstep --namespace lockstep-system " + kChart);
  const json* role = Find(objs, "ClusterRole");
  const json* binding = Find(objs, "ClusterRoleBinding");
  ASSERT_NE(role, nullptr);
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ((*binding)["roleRef"].value("name", ""), (*role)["metadata"].value("name", ""));
  EXPECT_EQ((*binding)["subjects"], json::parse(R"([{"kind":"ServiceAccount","name":"lockstep",
                             "namespace":"lockstep-system"}])"));
  std::set<std::string> perms = Permissions(*role);
  for (const std::string& p : perms) {
    EXPECT_EQ(p.find('*'), std::string::npos) << "wildcard: " << p;
    EXPECT_EQ(p.find("podgroups"), std::string::npos) << "gang scheduling is off: " << p;
    EXPECT_EQ(p.find("leases"), std::string::npos) << "leases are namespaced: " << p;
  }
  // The operator never reads secrets' contents through get, and never changes pods (unless
  // kueue.enabled: Kueue's pod groups).
  EXPECT_FALSE(perms.contains(" secrets get"));
  EXPECT_FALSE(perms.contains(" pods update"));
  EXPECT_FALSE(perms.contains(" pods patch"));

  const json* lease_role = Find(objs, "Role", "lockstep-leader-election");
  ASSERT_NE(lease_role, nullptr);
  EXPECT_EQ((*lease_role)["metadata"].value("namespace", ""), "lockstep-system");
  EXPECT_EQ(Permissions(*lease_role), (std::set<std::string>{"coordination.k8s.io leases create",
                                                             "coordination.k8s.io leases get",
                                                             "coordination.k8s.io leases update"}));
  // get and update are limited to the one Lease (create cannot be limited by name).
  for (const json& rule : (*lease_role)["rules"]) {
    bool create = rule["verbs"] == json::array({"create"});
    if (!create) {
      EXPECT_EQ(rule["resourceNames"], json::array({"lockstep-operator"}));
    }
  }
}

TEST(ChartTest, MetricsServiceSelectsTheOperatorPods) {
  std::vector<json> objs = Objects(kChart);
  const json* svc = Find(objs, "Service");
  const json* d = Find(objs, "Deployment");
  ASSERT_NE(svc, nullptr);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*svc)["spec"]["selector"], (*d)["spec"]["selector"]["matchLabels"]);
  EXPECT_EQ((*svc)["spec"]["ports"][0].value("targetPort", ""), "metrics");
  EXPECT_EQ(Find(objs, "ServiceMonitor"), nullptr);
}

TEST(ChartTest, CustomValuesNamespaceTheRbacAndChangeEverySwitch) {
  std::vector<json> objs = Objects("--name ml --namespace ops -f " + kCustom + " " + kChart);
  EXPECT_EQ(Kinds(objs), (std::multiset<std::string>{"Role", "RoleBinding", "Role", "RoleBinding",
                                                     "Service", "Deployment", "ServiceMonitor",
                                                     "PodMonitor", "PrometheusRule", "ConfigMap"}));
  // watchNamespace: a Role in team-a, no cluster-wide rights.
  const json* role = Find(objs, "Role", "lockstep-ops");
  ASSERT_NE(role, nullptr);
  EXPECT_EQ((*role)["metadata"].value("namespace", ""), "team-a");
  EXPECT_TRUE(Permissions(*role).contains("scheduling.volcano.sh podgroups create"));
  EXPECT_TRUE(Permissions(*role).contains(" pods patch"));               // kueue.enabled
  EXPECT_TRUE(Permissions(*role).contains("kubeflow.org tfjobs list"));  // tfjob.enabled
  const json* binding = Find(objs, "RoleBinding", "lockstep-ops");
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ((*binding)["metadata"].value("namespace", ""), "team-a");
  EXPECT_EQ((*binding)["subjects"][0].value("name", ""), "ml-platform-operator");
  EXPECT_EQ((*binding)["subjects"][0].value("namespace", ""), "ops");
  EXPECT_EQ(
      Find(objs, "Role", "lockstep-ops-leader-election")->at("metadata").value("namespace", ""),
      "ops");
  // serviceAccount.create false: none made, the named one used.
  EXPECT_EQ(Find(objs, "ServiceAccount"), nullptr);
  const json* d = Find(objs, "Deployment");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["metadata"].value("name", ""), "lockstep-ops");
  EXPECT_EQ((*d)["spec"].value("replicas", 0), 1);
  const json& spec = (*d)["spec"]["template"]["spec"];
  EXPECT_EQ(spec.value("serviceAccountName", ""), "ml-platform-operator");
  EXPECT_EQ(spec["imagePullSecrets"][0].value("name", ""), "registry-credentials");
  EXPECT_EQ(spec["nodeSelector"].size(), 1u);
  EXPECT_EQ(spec["tolerations"][0].value("operator", ""), "Exists");
  EXPECT_EQ((*d)["spec"]["template"]["metadata"]["annotations"].value("team", ""), "ml-platform");
  const json& c = spec["containers"][0];
  EXPECT_EQ(c.value("image", ""), "registry.example.com/ml/lockstep/operator:0.1.0-rc1");
  EXPECT_EQ(c.value("imagePullPolicy", ""), "Always");
  EXPECT_EQ(c["resources"]["limits"].value("memory", ""), "256Mi");
  // One replica: no disruption budget (it would block every drain).
  EXPECT_EQ(Find(objs, "PodDisruptionBudget"), nullptr);
  const json* monitor = Find(objs, "ServiceMonitor");
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ((*monitor)["metadata"]["labels"].value("release", ""), "prometheus");
  EXPECT_EQ((*monitor)["spec"]["endpoints"][0].value("interval", ""), "15s");
  EXPECT_EQ((*monitor)["spec"]["namespaceSelector"]["matchNames"], json::array({"ops"}));
}

// The monitoring objects: the trainers' PodMonitor, the alerts and the dashboard read only
// metrics the programs export (docs/reference/metrics.md, which docs_reference keeps equal to
// what the code registers).
TEST(ChartTest, MonitoringReadsOnlyMetricsThatExist) {
  std::vector<json> objs = Objects("--name ml --namespace ops -f " + kCustom + " " + kChart);
  const json* pods = Find(objs, "PodMonitor");
  ASSERT_NE(pods, nullptr);
  EXPECT_EQ((*pods)["spec"]["podMetricsEndpoints"][0].value("port", ""), "lockstep-metrics");
  EXPECT_EQ((*pods)["spec"]["namespaceSelector"]["matchNames"], json::array({"team-a"}));
  EXPECT_EQ((*pods)["spec"]["selector"]["matchExpressions"][0].value("key", ""),
            "lockstep.io/job-name");
  const json* monitor = Find(objs, "ServiceMonitor");
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ((*monitor)["spec"]["endpoints"][0].value("honorLabels", false), true);
  const json* dashboard = Find(objs, "ConfigMap");
  ASSERT_NE(dashboard, nullptr);
  EXPECT_EQ((*dashboard)["metadata"].value("namespace", ""), "monitoring");
  EXPECT_EQ((*dashboard)["metadata"]["labels"].value("grafana_dashboard", ""), "1");
  EXPECT_EQ((*dashboard)["metadata"]["annotations"].value("grafana_folder", ""), "Training");
  const json board = json::parse((*dashboard)["data"].value("lockstep.json", ""), nullptr, false);
  ASSERT_TRUE(board.is_object()) << "the dashboard is not JSON";
  const json* rule = Find(objs, "PrometheusRule");
  ASSERT_NE(rule, nullptr);

  std::vector<std::string> exprs;
  std::set<std::string> alerts;
  for (const json& g : (*rule)["spec"]["groups"]) {
    for (const json& r : g["rules"]) {
      exprs.push_back(r.value("expr", ""));
      alerts.insert(r.value("alert", ""));
    }
  }
  EXPECT_TRUE(alerts.contains("LockstepJobFailed"));
  EXPECT_TRUE(alerts.contains("LockstepJobStalled"));
  EXPECT_TRUE(alerts.contains("LockstepJobRestartBudgetNearlySpent"));
  EXPECT_EQ(exprs.size(), alerts.size());
  for (const std::string& e : exprs) {
    if (e.find("backoff_limit") != std::string::npos) {
      EXPECT_NE(e.find(">= 0.5"), std::string::npos) << e;
    }
  }
  std::set<std::string> titles;
  for (const json& p : board["panels"]) {
    titles.insert(p.value("title", ""));
    for (const json& t : p["targets"]) exprs.push_back(t.value("expr", ""));
  }
  for (const char* want :
       {"Jobs by state", "In-place recoveries", "Step time (p50, from the trainers)",
        "Samples per second", "Reconcile latency", "API writes"}) {
    EXPECT_TRUE(titles.contains(want)) << want;
  }
  const std::string reference =
      ReadFile(std::string(LOCKSTEP_SOURCE_DIR) + "/docs/reference/metrics.md");
  ASSERT_FALSE(reference.empty());
  const std::regex metric(R"(\b((lockstep|process)_[a-z_]+))");
  int checked = 0;
  for (const std::string& e : exprs) {
    for (std::sregex_iterator it(e.begin(), e.end(), metric), end; it != end; ++it) {
      std::string name = (*it)[1];
      for (const char* suffix : {"_bucket", "_count", "_sum"}) {
        if (name.ends_with(suffix) && reference.find("`" + name + "`") == std::string::npos) {
          name.resize(name.size() - std::string_view(suffix).size());
        }
      }
      EXPECT_NE(reference.find("`" + name + "`"), std::string::npos) << name << " in " << e;
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
  // A condition type an alert or a panel reads is one the operator sets.
  const std::regex type_value(R"(type=~?\"([A-Za-z|]+)\")");
  int types = 0;
  for (const std::string& e : exprs) {
    for (std::sregex_iterator it(e.begin(), e.end(), type_value), end; it != end; ++it) {
      std::stringstream alternatives((*it)[1].str());
      for (std::string t; std::getline(alternatives, t, '|');) {
        bool known = false;
        for (const auto& c : api::kConditionTypeNames) known = known || c.name == t;
        EXPECT_TRUE(known) << "condition type " << t << " in " << e;
        ++types;
      }
    }
  }
  EXPECT_GE(types, 4);
}

TEST(ChartTest, ADigestPinsTheImage) {
  ValuesFile v(
      "image: {digest: "
      "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}\n");
  std::vector<json> objs = Objects("-f " + v.path + " " + kChart);
  const json* d = Find(objs, "Deployment");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->at("spec")["template"]["spec"]["containers"][0].value("image", ""),
            "lockstep/operator@sha256:"
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
}

TEST(ChartTest, BadValuesAreRefusedWithTheirNames) {
  struct Case {
    std::string values, want;
  };
  for (const Case& c : std::vector<Case>{
           {"replicaCount: 0\n", "replicaCount: Must be greater than or equal to 1"},
           {"replicas: 2\n", "Additional property replicas is not allowed"},
           {"image: {pullPolicy: Sometimes}\n", "image.pullPolicy"},
           {"operator: {gangScheduler: kube-batch}\n", "operator.gangScheduler"},
           {"operator: {logFormat: xml}\n", "operator.logFormat"},
           {"operator: {extraArgs: [verbose]}\n", "operator.extraArgs.0"},
           {"watchNamespace: Team_A\n", "watchNamespace"},
           {"resources: {limits: {memory: lots}}\n", "resources.limits.memory"},
           {"image: {digest: latest}\n", "image.digest"},
           {"replicaCount: 3\nleaderElection: {enabled: false}\n",
            "replicaCount above 1 needs leaderElection.enabled"},
           {"metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}\n",
            "metrics.serviceMonitor.enabled needs metrics.service.enabled"},
           {"serviceAccount: {create: false}\n",
            "serviceAccount.name is required when serviceAccount.create is false"},
           {"operator: {progressInterval: 10}\n",
            "operator.progressInterval: 10 has no unit: write a duration such as \"10s\""},
           {"operator: {progressInterval: ten}\n", "operator.progressInterval"},
           {"metrics: {serviceMonitor: {enabled: true, scrapeTimeout: 5}}\n",
            "metrics.serviceMonitor.scrapeTimeout: 5 has no unit"},
       }) {
    SCOPED_TRACE(c.values);
    ValuesFile v(c.values);
    Rendered r = Render("-f " + v.path + " " + kChart);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  Rendered missing = Render("-f /nonexistent/values.yaml " + kChart);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("/nonexistent/values.yaml"), std::string::npos) << missing.err;
  ValuesFile broken("operator: {workers: [\n");
  Rendered bad_yaml = Render("-f " + broken.path + " " + kChart);
  EXPECT_EQ(bad_yaml.exit_code, 1);
  EXPECT_NE(bad_yaml.err.find(broken.path), std::string::npos) << bad_yaml.err;
}

TEST(ChartTest, NullInAValuesFileRemovesTheDefault) {
  // As in Helm: null deletes a key; the schema then says what is missing.
  ValuesFile v("leaderElection: null\n");
  Rendered r = Render("-f " + v.path + " " + kChart);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("leaderElection is required"), std::string::npos) << r.err;
}

TEST(ChartTest, NotesSayHowToWatchAJob) {
  Rendered r = Render("--notes --name lockstep --namespace lockstep-system " + kChart);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("release lockstep in namespace lockstep-system"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("kubectl wait --for=condition=Succeeded"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kubectl apply --server-side -f charts/lockstep/crds/"), std::string::npos)
      << r.out;  // helm upgrade leaves the CRD as it was
  EXPECT_NE(r.out.find("get lease lockstep-operator"), std::string::npos) << r.out;
  Rendered scoped = Render("--notes -f " + kCustom + " " + kChart);
  EXPECT_NE(scoped.out.find("in namespace team-a only"), std::string::npos) << scoped.out;
}

}  // namespace
}  // namespace lockstep::chart_test
