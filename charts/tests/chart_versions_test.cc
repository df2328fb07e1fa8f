// The chart on each Kubernetes version it supports (Chart.yaml: kubeVersion >=1.19.0-0), and the
// renderer's .Capabilities for each version. What a version serves is written here, apart from
// the renderer's table (charts/render/capabilities.go), from the Kubernetes Deprecated API
// Migration Guide: a wrong row in either one fails these tests. The PodDisruptionBudget is the
// chart's one object whose API moved within that range: policy/v1beta1 on 1.19 and 1.20,
// policy/v1 from 1.21, and policy/v1beta1 is no longer served from 1.25.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "charts/tests/chart_render.h"

namespace lockstep::chart_test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// "group/version/Kind" served by Kubernetes 1.since through 1.until (0: still served): every kind
// the chart renders, and more for the renderer's .Capabilities. Where a group/version is asked
// about below, all its kinds of that era are here (a group/version is served while one of its
// kinds is).
struct Served {
  std::string kind;
  int since, until;
};
const std::vector<Served> kServed = {
    {"v1/ConfigMap", 0, 0},
    {"v1/Service", 0, 0},
    {"v1/ServiceAccount", 0, 0},
    {"apps/v1/Deployment", 9, 0},
    {"rbac.authorization.k8s.io/v1/ClusterRole", 8, 0},
    {"rbac.authorization.k8s.io/v1/ClusterRoleBinding", 8, 0},
    {"rbac.authorization.k8s.io/v1/Role", 8, 0},
    {"rbac.authorization.k8s.io/v1/RoleBinding", 8, 0},
    {"rbac.authorization.k8s.io/v1beta1/ClusterRole", 6, 21},
    {"policy/v1/PodDisruptionBudget", 21, 0},
    {"policy/v1beta1/PodDisruptionBudget", 5, 24},
    {"policy/v1beta1/PodSecurityPolicy", 10, 24},
    {"apiextensions.k8s.io/v1/CustomResourceDefinition", 16, 0},
    {"apiextensions.k8s.io/v1beta1/CustomResourceDefinition", 7, 21},
    {"batch/v1/CronJob", 21, 0},
    {"batch/v1beta1/CronJob", 8, 24},
    {"autoscaling/v2/HorizontalPodAutoscaler", 23, 0},
    {"autoscaling/v2beta2/HorizontalPodAutoscaler", 12, 25},
    {"networking.k8s.io/v1/Ingress", 19, 0},
    {"networking.k8s.io/v1beta1/Ingress", 14, 21},
    {"networking.k8s.io/v1beta1/IngressClass", 18, 21},
};

// Not built in: the Prometheus Operator's CRDs, which metrics.serviceMonitor, .podMonitor and
// .prometheusRule require.
const std::string kServiceMonitor = "monitoring.coreos.com/v1/ServiceMonitor";
bool IsPrometheusOperators(const std::string& kind) {
  return kind.starts_with("monitoring.coreos.com/v1/");
}

bool IsServed(const std::string& api, int minor) {
  for (const Served& s : kServed) {
    bool listed = s.kind == api || s.kind.starts_with(api + "/");
    if (listed && minor >= s.since && (s.until == 0 || minor <= s.until)) return true;
  }
  return false;
}

bool IsListed(const std::string& kind) {
  for (const Served& s : kServed) {
    if (s.kind == kind) return true;
  }
  return false;
}

// The chart's supported range, its edges and where the disruption budget's API changes.
const std::vector<int> kMinors = {19, 20, 21, 24, 25, 31};

std::string KubeVersion(int minor) { return "--kube-version v1." + std::to_string(minor) + ".0 "; }

// Defaults (two replicas: a PodDisruptionBudget); every switch changed (one replica, none); every
// switch changed with three replicas (a budget again, beside the namespaced RBAC).
struct ValueSet {
  std::string name, args;
  bool budget;
};

class ChartVersionsTest : public ::testing::Test {
 protected:
  ValuesFile three_replicas_{"replicaCount: 3\n"};
  std::vector<ValueSet> value_sets_ = {
      {"defaults", "", true},
      {"custom", "-f " + kCustom, false},
      {"custom, 3 replicas", "-f " + kCustom + " -f " + three_replicas_.path, true},
  };
};

TEST_F(ChartVersionsTest, EveryObjectIsOneTheKubernetesVersionServes) {
  for (int minor : kMinors) {
    for (const ValueSet& v : value_sets_) {
      SCOPED_TRACE("1." + std::to_string(minor) + ", " + v.name);
      std::vector<json> objs =
          Objects(KubeVersion(minor) + "--include-crds " + v.args + " " + kChart);
      ASSERT_FALSE(objs.empty());
      EXPECT_EQ(objs[0].value("kind", ""), "CustomResourceDefinition");
      for (const json& o : objs) {
        std::string kind = o.value("apiVersion", "") + "/" + o.value("kind", "");
        if (IsPrometheusOperators(kind)) continue;
        EXPECT_TRUE(IsListed(kind)) << kind << ": not in kServed; add it, from the migration guide";
        EXPECT_TRUE(IsServed(kind, minor)) << kind << " is not served by 1." << minor;
      }
      EXPECT_EQ(Find(objs, "PodDisruptionBudget") != nullptr, v.budget);
    }
  }
}

TEST_F(ChartVersionsTest, TheDisruptionBudgetIsPolicyV1From121AndV1beta1Before) {
  for (int minor : kMinors) {
    for (const ValueSet& v : value_sets_) {
      if (!v.budget) continue;
      SCOPED_TRACE("1." + std::to_string(minor) + ", " + v.name);
      std::vector<json> objs = Objects(KubeVersion(minor) + v.args + " " + kChart);
      const json* pdb = Find(objs, "PodDisruptionBudget");
      ASSERT_NE(pdb, nullptr);
      EXPECT_EQ(pdb->value("apiVersion", ""), minor >= 21 ? "policy/v1" : "policy/v1beta1");
      if (minor >= 25) {  // gone from 1.25, for every object
        for (const json& o : objs) EXPECT_NE(o.value("apiVersion", ""), "policy/v1beta1");
      }
    }
  }
  // A provider's version string.
  std::vector<json> gke = Objects("--kube-version v1.21.3-gke.100 " + kChart);
  const json* pdb = Find(gke, "PodDisruptionBudget");
  ASSERT_NE(pdb, nullptr);
  EXPECT_EQ(pdb->value("apiVersion", ""), "policy/v1");
  // `helm template` without a cluster lists policy/v1 whatever the version (the group/versions
  // Helm was built with): the version still decides.
  std::vector<json> offline = Objects("--kube-version 1.20.4 --api-versions policy/v1 " + kChart);
  pdb = Find(offline, "PodDisruptionBudget");
  ASSERT_NE(pdb, nullptr);
  EXPECT_EQ(pdb->value("apiVersion", ""), "policy/v1beta1");
}

TEST(ChartVersions, KubernetesOlderThanTheChartsKubeVersionIsRefused) {
  for (const auto& [given, named] : std::vector<std::pair<std::string, std::string>>{
           {"1.18", "v1.18.0"}, {"v1.18.20", "v1.18.20"}, {"1.16.0", "v1.16.0"}}) {
    SCOPED_TRACE(given);
    Rendered r = Render("--kube-version " + given + " " + kChart);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err,
              "lockstep-chart-render: chart requires kubeVersion: >=1.19.0-0 which is "
              "incompatible with Kubernetes " +
                  named + "\n");
    EXPECT_TRUE(r.out.empty());
  }
  EXPECT_EQ(Render("--kube-version 1.19.0 " + kChart).exit_code, 0);
}

TEST(ChartVersions, ABadKubeVersionOrApiVersionIsAUsageError) {
  for (const char* args : {"--kube-version banana", "--kube-version ''", "--kube-version 1.x",
                           "--kube-version 1.15", "--kube-version 2.0", "--api-versions ''",
                           "--api-versions policy/v1,", "--api-versions a/v1/Kind/extra"}) {
    SCOPED_TRACE(args);
    Rendered r = Render(std::string(args) + " " + kChart);
    EXPECT_EQ(r.exit_code, 2);
    std::string flag(args, std::string_view(args).find(' '));  // the message names the flag
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

// A chart of one ConfigMap that reports .Capabilities: which of `asked` are served, and the
// version. No kubeVersion in its Chart.yaml, so every version the renderer knows renders it.
class CapabilitiesChart {
 public:
  CapabilitiesChart() {
    fs::create_directories(dir_ / "templates");
    std::ofstream(dir_ / "Chart.yaml") << "apiVersion: v2\nname: caps\nversion: 0.1.0\n";
    std::ofstream(dir_ / "values.yaml") << "asked: []\n";
    std::ofstream(dir_ / "templates" / "caps.yaml") << R"(apiVersion: v1
kind: ConfigMap
metadata: {name: caps}
data:
  {{- $served := list }}
  {{- range .Values.asked }}
  {{- if $.Capabilities.APIVersions.Has . }}{{ $served = append $served . }}{{ end }}
  {{- end }}
  served: {{ toJson $served | quote }}
  version: {{ .Capabilities.KubeVersion.Version | quote }}
  gitVersion: {{ .Capabilities.KubeVersion.GitVersion | quote }}
  major: {{ .Capabilities.KubeVersion.Major | quote }}
  minor: {{ .Capabilities.KubeVersion.Minor | quote }}
)";
  }
  ~CapabilitiesChart() { fs::remove_all(dir_); }

  // The ConfigMap's data, rendered with `args` and asked about `asked`.
  json Data(const std::string& args, const std::vector<std::string>& asked) {
    ValuesFile values("asked: " + json(asked).dump() + "\n");  // JSON is YAML
    std::vector<json> objs = Objects(args + " -f " + values.path + " " + dir_.string());
    return objs.size() == 1 ? objs[0]["data"] : json();
  }

 private:
  fs::path dir_ = fs::temp_directory_path() / ("chart_caps_" + std::to_string(::getpid()));
};

TEST(ChartVersions, CapabilitiesListWhatTheKubernetesVersionServes) {
  std::vector<std::string> asked = {"v1",
                                    "policy/v1",
                                    "policy/v1beta1",
                                    "batch/v1beta1",
                                    "autoscaling/v2",
                                    "autoscaling/v2beta2",
                                    "networking.k8s.io/v1beta1",
                                    "apiextensions.k8s.io/v1beta1",
                                    "monitoring.coreos.com/v1",
                                    "v1/NoSuchKind"};
  for (const Served& s : kServed) asked.push_back(s.kind);
  CapabilitiesChart chart;
  for (int minor : {16, 19, 20, 21, 22, 23, 24, 25, 26, 31}) {
    SCOPED_TRACE("1." + std::to_string(minor));
    json data = chart.Data(KubeVersion(minor), asked);
    ASSERT_TRUE(data.is_object());
    std::vector<std::string> want;
    for (const std::string& a : asked) {
      if (IsServed(a, minor)) want.push_back(a);
    }
    EXPECT_EQ(json::parse(data.value("served", "null")), json(want));
    EXPECT_EQ(data.value("version", ""), "v1." + std::to_string(minor) + ".0");
    EXPECT_EQ(data.value("minor", ""), std::to_string(minor));
  }
  // --api-versions adds a CRD's group/version and kind, repeated or comma-separated.
  json data = chart.Data(
      "--kube-version 1.21.3-gke.100 --api-versions monitoring.coreos.com/v1 "
      "-a monitoring.coreos.com/v1/ServiceMonitor,example.com/v1",
      {"monitoring.coreos.com/v1", kServiceMonitor, "example.com/v1", "example.com/v2",
       "policy/v1"});
  ASSERT_TRUE(data.is_object());
  EXPECT_EQ(json::parse(data.value("served", "null")),
            json({"monitoring.coreos.com/v1", kServiceMonitor, "example.com/v1", "policy/v1"}));
  EXPECT_EQ(data.value("version", ""), "v1.21.3-gke.100");
  EXPECT_EQ(data.value("gitVersion", ""), "v1.21.3-gke.100");
  EXPECT_EQ(data.value("major", ""), "1");
  EXPECT_EQ(data.value("minor", ""), "21");
}

}  // namespace
}  // namespace lockstep::chart_test
