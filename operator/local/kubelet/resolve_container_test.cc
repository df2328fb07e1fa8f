// ResolveContainer as a table: a pod and a context in, a launch spec or a waiting reason out.
#include "operator/local/kubelet/resolve_container.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "absl/strings/escaping.h"

namespace lockstep::local {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

json PodWith(json container, json spec_extra = json::object()) {
  json spec = {{"containers", json::array({std::move(container)})}};
  spec.update(spec_extra);
  return {{"metadata", {{"name", "p"}, {"namespace", "ns"}, {"labels", {{"app", "web"}}}}},
          {"spec", spec}};
}

ContainerContext Context() {
  ContainerContext ctx;
  ctx.ns = "ns";
  ctx.name = "p";
  ctx.uid = "u1";
  ctx.pod_ip = "127.0.3.4";
  ctx.pod_dir = "/state/pods/ns_p_u1";
  ctx.state_dir = "/state";
  ctx.node_name = "node-a";
  ctx.trainer_binary = "/build/lockstep-trainer";
  ctx.operator_binary = "";
  ctx.path = "/opt/bin:/usr/bin";
  ctx.termination_log = "/state/pods/ns_p_u1/main.termination-log";
  static const std::set<std::string> kExecutables = {"/build/lockstep-trainer", "/usr/bin/sh",
                                                     "/opt/tool"};
  ctx.executable = [](const std::string& p) { return kExecutables.contains(p); };
  ctx.get_object = [](bool secret, const std::string& name) -> absl::StatusOr<json> {
    if (secret && name == "token") {
      return json{{"data", {{"key", absl::Base64Escape("s3cret")}, {"bad", "%%%"}}}};
    }
    if (!secret && name == "settings") return json{{"data", {{"mode", "fast"}}}};
    return absl::NotFoundError("not found");
  };
  return ctx;
}

const LaunchSpec& Launch(const std::variant<LaunchSpec, Waiting>& r) {
  if (const Waiting* w = std::get_if<Waiting>(&r)) {
    ADD_FAILURE() << "waiting: " << w->reason << ": " << w->message;
    static const LaunchSpec kNone;
    return kNone;
  }
  return std::get<LaunchSpec>(r);
}

TEST(ResolveContainerTest, WaitingReasons) {
  struct Case {
    const char* what;
    json pod;
    std::string reason;
    std::string message;
  };
  std::vector<Case> cases = {
      {"operator image, binary not built",
       PodWith({{"name", "main"}, {"image", "reg.io/lockstep/operator:1"}}), "ErrImagePull",
       "runs the local operator, which is not built (no binary given)"},
      {"foreign image without a command", PodWith({{"name", "main"}, {"image", "debian"}}),
       "ErrImagePull", "the container has no command"},
      {"command not on this machine",
       PodWith({{"name", "main"}, {"image", "debian"}, {"command", {"python9"}}}), "ErrImagePull",
       "program \"python9\" is not on this machine"},
      {"unsupported fieldRef",
       PodWith(
           {{"name", "main"},
            {"image", "lockstep/trainer"},
            {"env", {{{"name", "X"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.x"}}}}}}}}}),
       "CreateContainerConfigError", "env X: fieldRef spec.x is not supported"},
      {"missing secret key",
       PodWith({{"name", "main"},
                {"image", "lockstep/trainer"},
                {"env",
                 {{{"name", "T"},
                   {"valueFrom", {{"secretKeyRef", {{"name", "token"}, {"key", "nope"}}}}}}}}}),
       "CreateContainerConfigError", "env T: secret \"token\" key \"nope\" not found"},
      {"secret value not base64",
       PodWith({{"name", "main"},
                {"image", "lockstep/trainer"},
                {"env",
                 {{{"name", "T"},
                   {"valueFrom", {{"secretKeyRef", {{"name", "token"}, {"key", "bad"}}}}}}}}}),
       "CreateContainerConfigError", "is not base64"},
      {"volumeMount naming no volume",
       PodWith({{"name", "main"},
                {"image", "lockstep/trainer"},
                {"volumeMounts", {{{"name", "data"}, {"mountPath", "/data"}}}}}),
       "CreateContainerConfigError", "volumeMount \"data\" names no volume of the pod"},
      {"unsupported volume type",
       PodWith({{"name", "main"},
                {"image", "lockstep/trainer"},
                {"volumeMounts", {{{"name", "data"}, {"mountPath", "/data"}}}}},
               {{"volumes", {{{"name", "data"}, {"nfs", {{"server", "x"}}}}}}}),
       "CreateContainerConfigError", "mounts persistentVolumeClaim, emptyDir, hostPath, configMap"},
      // The program is checked before the environment: the first problem is the one shown.
      {"program before env",
       PodWith({{"name", "main"},
                {"image", "debian"},
                {"command", {"python9"}},
                {"env", {{{"name", "X"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "x"}}}}}}}}}),
       "ErrImagePull", "python9"},
  };
  for (const Case& c : cases) {
    std::variant<LaunchSpec, Waiting> r = ResolveContainer(c.pod, 0, Context());
    const Waiting* w = std::get_if<Waiting>(&r);
    ASSERT_NE(w, nullptr) << c.what;
    EXPECT_EQ(w->reason, c.reason) << c.what;
    EXPECT_THAT(w->message, HasSubstr(c.message)) << c.what;
  }
}

TEST(ResolveContainerTest, ImagesAndCommands) {
  struct Case {
    const char* what;
    json container;
    std::vector<std::string> argv;
  };
  std::vector<Case> cases = {
      {"trainer image runs the local trainer with args",
       {{"name", "main"}, {"image", "gcr.io/x/lockstep/trainer@sha256:ab"}, {"args", {"--x"}}},
       {"/build/lockstep-trainer", "--x"}},
      {"a command found along PATH",
       {{"name", "main"}, {"image", "debian"}, {"command", {"sh", "-c", "true"}}},
       {"/usr/bin/sh", "-c", "true"}},
      {"a command with a path",
       {{"name", "main"}, {"image", "x"}, {"command", {"/opt/tool"}}},
       {"/opt/tool"}},
      {"a command on a trainer image replaces the trainer",
       {{"name", "main"}, {"image", "lockstep/trainer"}, {"command", {"/opt/tool"}}},
       {"/opt/tool"}},
      {"$(VAR) expands, $$ is a dollar, unknown references stay",
       {{"name", "main"},
        {"image", "lockstep/trainer"},
        {"args", {"--a=$(A)", "$$(A)", "$(NONE)"}},
        {"env", {{{"name", "A"}, {"value", "1"}}}}},
       {"/build/lockstep-trainer", "--a=1", "$(A)", "$(NONE)"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Launch(ResolveContainer(PodWith(c.container), 0, Context())).argv, c.argv) << c.what;
  }
}

TEST(ResolveContainerTest, EnvironmentFromValuesFieldsSecretsAndConfigMaps) {
  json container = {
      {"name", "main"},
      {"image", "lockstep/trainer"},
      {"workingDir", "/work"},
      {"env",
       {{{"name", "PLAIN"}, {"value", "v"}},
        {{"name", "IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}},
        {{"name", "NODE"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}},
        {{"name", "APP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.labels['app']"}}}}}},
        {{"name", "TOKEN"}, {"valueFrom", {{"secretKeyRef", {{"name", "token"}, {"key", "key"}}}}}},
        {{"name", "MODE"},
         {"valueFrom", {{"configMapKeyRef", {{"name", "settings"}, {"key", "mode"}}}}}}}}};
  LaunchSpec spec =
      Launch(ResolveContainer(PodWith(container, {{"hostname", "h0"}}), 0, Context()));
  EXPECT_THAT(
      spec.env,
      ElementsAre("PATH=/opt/bin:/usr/bin", "HOSTNAME=h0",
                  "LOCKSTEP_TERMINATION_LOG=/state/pods/ns_p_u1/main.termination-log", "PLAIN=v",
                  "IP=127.0.3.4", "NODE=node-a", "APP=web", "TOKEN=s3cret", "MODE=fast"));
  EXPECT_EQ(spec.working_dir, "/work");
  EXPECT_EQ(spec.log_path, "/state/pods/ns_p_u1/main.log");
  EXPECT_EQ(spec.hosts_path, "/state/pods/ns_p_u1/hosts");
  EXPECT_TRUE(spec.service_account_dir.empty());  // no API server address in this context
  EXPECT_FALSE(spec.kubeconfig_env.has_value());
}

// The CPU share a node's cgroup would give, as LOCKSTEP_CPU_LIMIT: limits.cpu, else the
// machine's CPUs over the tasks of the TF_CONFIG cluster, else none; a value the pod sets wins.
TEST(ResolveContainerTest, EveryTaskGetsACpuShare) {
  ContainerContext ctx = Context();
  ctx.cpus = 16;
  const std::string four_tasks =
      R"({"cluster":{"chief":["c:1"],"worker":["w0:1","w1:1"],"ps":["p:1"]},)"
      R"("task":{"type":"worker","index":1}})";
  const std::string evaluator =
      R"({"cluster":{"chief":["c:1"],"worker":["w0:1","w1:1"]},"task":{"type":"evaluator","index":0}})";
  auto share = [&](json container, const ContainerContext& context) {
    container["name"] = "main";
    container["image"] = "lockstep/trainer";
    LaunchSpec spec = Launch(ResolveContainer(PodWith(container), 0, context));
    std::string found = "none";
    for (const std::string& e : spec.env) {
      if (e.rfind("LOCKSTEP_CPU_LIMIT=", 0) == 0) found = e.substr(19);
    }
    return found;
  };
  auto with_tf = [](const std::string& tf) {
    return json{{"env", {{{"name", "TF_CONFIG"}, {"value", tf}}}}};
  };
  EXPECT_EQ(share(with_tf(four_tasks), ctx), "4");
  EXPECT_EQ(share(with_tf(evaluator), ctx), "4");  // 3 in the cluster and the evaluator
  json limited = with_tf(four_tasks);
  for (const auto& [cpu, want] : std::vector<std::pair<json, std::string>>{
           {"2", "2"}, {"500m", "0.5"}, {1.5, "1.5"}, {"1500m", "1.5"}}) {
    limited["resources"] = {{"limits", {{"cpu", cpu}}}};
    EXPECT_EQ(share(limited, ctx), want) << cpu;
  }
  limited["resources"] = {{"limits", {{"cpu", "lots"}}}};  // not a quantity: the even share
  EXPECT_EQ(share(limited, ctx), "4");
  ctx.cpus = 2;  // more tasks than CPUs: one each
  EXPECT_EQ(share(with_tf(four_tasks), ctx), "1");
  EXPECT_EQ(share(json::object(), ctx), "none");  // not a training task
  EXPECT_EQ(share(with_tf("{not json"), ctx), "none");
  json own = with_tf(four_tasks);
  own["env"].push_back({{"name", "LOCKSTEP_CPU_LIMIT"}, {"value", "3"}});
  EXPECT_EQ(share(own, ctx), "3");
}

TEST(ResolveContainerTest, ConfigMapAndSecretVolumesProjectTheirKeys) {
  ContainerContext ctx = Context();
  json container = {{"name", "main"},
                    {"image", "lockstep/trainer"},
                    {"volumeMounts",
                     {{{"name", "model"}, {"mountPath", "/model"}},
                      {{"name", "creds"}, {"mountPath", "/creds"}}}}};
  json volumes = {
      {"volumes",
       {{{"name", "model"},
         {"configMap",
          {{"name", "settings"}, {"items", {{{"key", "mode"}, {"path", "conf/mode.txt"}}}}}}},
        {{"name", "creds"},
         {"secret",
          {{"secretName", "token"},
           {"defaultMode", 0400},
           {"items", {{{"key", "key"}, {"path", "k"}}}}}}}}}};
  LaunchSpec spec = Launch(ResolveContainer(PodWith(container, volumes), 0, ctx));
  ASSERT_EQ(spec.mounts.size(), 2u);
  EXPECT_EQ(spec.mounts[0].source, "/state/pods/ns_p_u1/volumes/model");
  EXPECT_EQ(spec.mounts[0].target, "/model");
  ASSERT_EQ(spec.files.size(), 2u);
  EXPECT_EQ(spec.files[0].path, "/state/pods/ns_p_u1/volumes/model/conf/mode.txt");
  EXPECT_EQ(spec.files[0].content, "fast");
  EXPECT_EQ(spec.files[1].path, "/state/pods/ns_p_u1/volumes/creds/k");
  EXPECT_EQ(spec.files[1].content, "s3cret");  // decoded
  EXPECT_EQ(spec.files[1].mode, 0400);

  // A missing ConfigMap waits, unless the volume is optional; a missing item key waits.
  json missing = volumes;
  missing["volumes"][0]["configMap"] = {{"name", "absent"}};
  auto r = ResolveContainer(PodWith(container, missing), 0, ctx);
  ASSERT_TRUE(std::holds_alternative<Waiting>(r));
  EXPECT_EQ(std::get<Waiting>(r).message, "volume \"model\": configmap \"absent\" not found");
  missing["volumes"][0]["configMap"]["optional"] = true;
  EXPECT_EQ(Launch(ResolveContainer(PodWith(container, missing), 0, ctx)).files.size(), 1u);
  json nokey = volumes;
  nokey["volumes"][0]["configMap"]["items"][0]["key"] = "speed";
  r = ResolveContainer(PodWith(container, nokey), 0, ctx);
  ASSERT_TRUE(std::holds_alternative<Waiting>(r));
  EXPECT_EQ(std::get<Waiting>(r).message, "configmap \"settings\" has no key \"speed\"");
  json escape = volumes;
  escape["volumes"][0]["configMap"]["items"][0]["path"] = "../../etc/passwd";
  r = ResolveContainer(PodWith(container, escape), 0, ctx);
  ASSERT_TRUE(std::holds_alternative<Waiting>(r));
  EXPECT_NE(std::get<Waiting>(r).message.find("must be relative"), std::string::npos);
}

TEST(ResolveContainerTest, ServiceAccountAndVolumes) {
  ContainerContext ctx = Context();
  std::vector<std::string> accounts;
  ctx.service_account_files = [&](const std::string& account) -> absl::StatusOr<std::string> {
    accounts.push_back(account);
    if (account == "locked") return absl::PermissionDeniedError("service account token: denied");
    return std::string("/state/pods/ns_p_u1/serviceaccount");
  };
  json container = {{"name", "main"},
                    {"image", "lockstep/trainer"},
                    {"volumeMounts",
                     {{{"name", "ckpt"}, {"mountPath", "/checkpoints"}},
                      {{"name", "scratch"}, {"mountPath", "/tmp"}},
                      {{"name", "host"}, {"mountPath", "/data"}}}}};
  json volumes = {{"volumes",
                   {{{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "shared"}}}},
                    {{"name", "scratch"}, {"emptyDir", json::object()}},
                    {{"name", "host"}, {"hostPath", {{"path", "/srv/data"}}}}}}};
  LaunchSpec spec = Launch(ResolveContainer(PodWith(container, volumes), 0, ctx));
  EXPECT_THAT(accounts, ElementsAre("default"));
  EXPECT_EQ(spec.service_account_dir, "/state/pods/ns_p_u1/serviceaccount");
  ASSERT_TRUE(spec.kubeconfig_env.has_value());
  EXPECT_EQ(spec.env.at(*spec.kubeconfig_env),
            std::string("KUBECONFIG=") + kServiceAccountDir + "/kubeconfig");
  EXPECT_EQ(spec.kubeconfig_fallback, "KUBECONFIG=/state/pods/ns_p_u1/serviceaccount/kubeconfig");
  ASSERT_EQ(spec.mounts.size(), 3u);
  EXPECT_EQ(spec.mounts[0].source, "/state/volumes/ns/shared");
  EXPECT_EQ(spec.mounts[0].target, "/checkpoints");
  EXPECT_EQ(spec.mounts[1].source, "/state/pods/ns_p_u1/volumes/scratch");
  EXPECT_EQ(spec.mounts[2].source, "/srv/data");

  // Without a mount namespace KUBECONFIG names the pod directory's copy.
  ctx.private_mounts = false;
  spec = Launch(ResolveContainer(PodWith(container, volumes), 0, ctx));
  EXPECT_THAT(spec.env, Contains("KUBECONFIG=/state/pods/ns_p_u1/serviceaccount/kubeconfig"));

  // automountServiceAccountToken: false, a named account, and an account that fails.
  json no_token = volumes;
  no_token["automountServiceAccountToken"] = false;
  spec = Launch(ResolveContainer(PodWith(container, no_token), 0, ctx));
  EXPECT_TRUE(spec.service_account_dir.empty());
  json locked = volumes;
  locked["serviceAccountName"] = "locked";
  std::variant<LaunchSpec, Waiting> r = ResolveContainer(PodWith(container, locked), 0, ctx);
  ASSERT_TRUE(std::holds_alternative<Waiting>(r));
  EXPECT_EQ(std::get<Waiting>(r).reason, "CreateContainerConfigError");
  EXPECT_EQ(std::get<Waiting>(r).message, "service account token: denied");
}

TEST(ResolveContainerTest, ImageNames) {
  EXPECT_TRUE(IsImage("lockstep/trainer", "lockstep/trainer"));
  EXPECT_TRUE(IsImage("lockstep/trainer:0.1.0", "lockstep/trainer"));
  EXPECT_TRUE(IsImage("registry:5000/ml/lockstep/trainer@sha256:00", "lockstep/trainer"));
  EXPECT_FALSE(IsImage("mylockstep/trainer", "lockstep/trainer"));
  EXPECT_FALSE(IsImage("lockstep/trainer-gpu", "lockstep/trainer"));
}

}  // namespace
}  // namespace lockstep::local
