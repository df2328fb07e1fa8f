// The local deployment controller against an in-process API server, one Sync() at a time.
#include "operator/local/controllers/deployments.h"

#include <gtest/gtest.h>

#include "common/testing/fake_clock.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/local_transport.h"

namespace lockstep::local {
namespace {

using nlohmann::json;

const kube::Resource kDeployments{"apps", "v1", "deployments", "Deployment", true};

class DeploymentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = ApiServer::Create({}).value();
    client_ = std::make_unique<kube::RestClient>(std::make_shared<LocalTransport>(api_.get()));
    controller_ = std::make_unique<DeploymentController>(client_.get(), &clock_);
  }
  json Deployment(int replicas, const std::string& image) {
    json d = json::parse(R"({"apiVersion":"apps/v1","kind":"Deployment",
      "metadata":{"name":"op"},
      "spec":{"selector":{"matchLabels":{"app":"op"}},
        "template":{"metadata":{"labels":{"app":"op"},"annotations":{"a":"b"}},
          "spec":{"serviceAccountName":"op","containers":[{"name":"c","image":"x"}]}}}})");
    d["spec"]["replicas"] = replicas;
    d["spec"]["template"]["spec"]["containers"][0]["image"] = image;
    return d;
  }
  std::vector<json> Pods() {
    json list = client_->List(kube::resources::kPods, "default").value();
    return list["items"].get<std::vector<json>>();
  }
  json Get() { return client_->Get(kDeployments, "default", "op").value(); }
  void MarkReady(const json& pod) {
    ASSERT_TRUE(client_
                    ->Patch(kube::resources::kPods, "default",
                            pod["metadata"]["name"].get<std::string>(), kube::PatchType::kMerge,
                            {{"status",
                              {{"phase", "Running"},
                               {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                            "status")
                    .ok());
  }

  common::FakeClock clock_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<DeploymentController> controller_;
};

TEST_F(DeploymentsTest, CreatesOwnedPodsOfTheTemplate) {
  json created = client_->Create(kDeployments, "default", Deployment(2, "img:1")).value();
  controller_->Sync();
  std::vector<json> pods = Pods();
  ASSERT_EQ(pods.size(), 2u);
  std::string hash = PodTemplateHash(created["spec"]["template"]);
  for (const json& p : pods) {
    EXPECT_EQ(p["metadata"]["name"].get<std::string>().rfind("op-" + hash + "-", 0), 0u);
    EXPECT_EQ(p["metadata"]["labels"]["app"], "op");
    EXPECT_EQ(p["metadata"]["labels"]["pod-template-hash"], hash);
    EXPECT_EQ(p["metadata"]["annotations"]["a"], "b");
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["controller"], true);
    EXPECT_EQ(p["spec"]["serviceAccountName"], "op");
  }
  // Converged: another pass changes nothing.
  controller_->Sync();
  EXPECT_EQ(Pods().size(), 2u);
  json status = Get()["status"];
  EXPECT_EQ(status["replicas"], 2);
  EXPECT_EQ(status["readyReplicas"], 0);
  EXPECT_EQ(status["conditions"][0]["type"], "Available");
  EXPECT_EQ(status["conditions"][0]["status"], "False");
}

TEST_F(DeploymentsTest, ReportsAvailableWhenPodsAreReady) {
  client_->Create(kDeployments, "default", Deployment(2, "img:1")).value();
  controller_->Sync();
  for (const json& p : Pods()) MarkReady(p);
  controller_->Sync();
  json status = Get()["status"];
  EXPECT_EQ(status["readyReplicas"], 2);
  EXPECT_EQ(status["availableReplicas"], 2);
  EXPECT_EQ(status["observedGeneration"], 1);
  EXPECT_EQ(status["conditions"][0]["status"], "True");
}

TEST_F(DeploymentsTest, ScalesAndReplacesPodsOfAnOldTemplate) {
  client_->Create(kDeployments, "default", Deployment(3, "img:1")).value();
  controller_->Sync();
  ASSERT_EQ(Pods().size(), 3u);
  json d = Get();
  d["spec"]["replicas"] = 1;
  ASSERT_TRUE(client_->Update(kDeployments, "default", d).ok());
  controller_->Sync();
  EXPECT_EQ(Pods().size(), 1u);

  d = Get();
  d["spec"]["template"]["spec"]["containers"][0]["image"] = "img:2";
  d = client_->Update(kDeployments, "default", d).value();
  controller_->Sync();
  std::vector<json> pods = Pods();
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0]["spec"]["containers"][0]["image"], "img:2");
  EXPECT_EQ(pods[0]["metadata"]["labels"]["pod-template-hash"],
            PodTemplateHash(d["spec"]["template"]));
}

TEST_F(DeploymentsTest, ReplacesFailedPodsAndLeavesOthersPodsAlone) {
  ASSERT_TRUE(client_
                  ->Create(kube::resources::kPods, "default",
                           json::parse(R"({"metadata":{"name":"stranger","labels":{"app":"op"}},
                             "spec":{"containers":[{"name":"c","image":"y"}]}})"))
                  .ok());
  client_->Create(kDeployments, "default", Deployment(1, "img:1")).value();
  controller_->Sync();
  ASSERT_EQ(Pods().size(), 2u);  // the stranger is not adopted
  for (const json& p : Pods()) {
    if (p["metadata"]["name"] == "stranger") continue;
    ASSERT_TRUE(client_
                    ->Patch(kube::resources::kPods, "default",
                            p["metadata"]["name"].get<std::string>(), kube::PatchType::kMerge,
                            {{"status", {{"phase", "Failed"}}}}, "status")
                    .ok());
  }
  controller_->Sync();
  int owned_running = 0;
  for (const json& p : Pods()) {
    if (p["metadata"]["name"] == "stranger") continue;
    EXPECT_NE(p.value("status", json::object()).value("phase", ""), "Failed");
    ++owned_running;
  }
  EXPECT_EQ(owned_running, 1);
}

TEST_F(DeploymentsTest, DeletingTheDeploymentDeletesItsPods) {
  client_->Create(kDeployments, "default", Deployment(2, "img:1")).value();
  controller_->Sync();
  ASSERT_EQ(Pods().size(), 2u);
  ASSERT_TRUE(client_->Delete(kDeployments, "default", "op").ok());
  // Pods go through graceful deletion (the runner finishes it); both are marked.
  for (const json& p : Pods()) EXPECT_TRUE(p["metadata"].contains("deletionTimestamp"));
}

}  // namespace
}  // namespace lockstep::local
