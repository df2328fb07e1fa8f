#include "operator/kube/kube_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "common/testing/fake_clock.h"
#include "operator/kube/connect.h"
#include "operator/kube/testing/fake_transport.h"

namespace lockstep::kube {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep-kubeconfig-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  fs::path dir_;
};

constexpr char kConfig[] = R"(apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c1, user: alice, namespace: ml}
- name: prod
  context: {cluster: c2, user: bob}
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: certs/ca.pem
- name: c2
  cluster:
    server: https://prod:6443
    insecure-skip-tls-verify: true
users:
- name: alice
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: bob
  user:
    token: secret-token
)";

TEST_F(KubeconfigTest, CurrentContextWithFilesRelativeToTheKubeconfig) {
  Write("certs/ca.pem", "CA-PEM");
  std::string path = Write("config", kConfig);
  absl::StatusOr<RestConfig> c = LoadKubeconfig({path});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_pem, "CA-PEM");
  EXPECT_EQ(c->client_cert_pem, "CERT");
  EXPECT_EQ(c->client_key_pem, "KEY");
  EXPECT_EQ(c->namespace_, "ml");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
  EXPECT_THAT(c->source, HasSubstr("context dev"));
}

TEST_F(KubeconfigTest, NamedContextWithTokenAndInsecure) {
  Write("certs/ca.pem", "CA-PEM");
  absl::StatusOr<RestConfig> c = LoadKubeconfig({Write("config", kConfig)}, "prod");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://prod:6443");
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->bearer_token, "secret-token");
  EXPECT_EQ(c->namespace_, "default");
}

TEST_F(KubeconfigTest, MergedFilesFirstDefinitionWins) {
  std::string a = Write("a", R"(
current-context: local
contexts: [{name: local, context: {cluster: here, user: me}}]
clusters: [{name: here, cluster: {server: "http://127.0.0.1:8080"}}]
)");
  std::string b = Write("b", R"(
current-context: elsewhere
clusters: [{name: here, cluster: {server: "http://ignored:1"}}]
users: [{name: me, user: {tokenFile: tok}}]
)");
  absl::StatusOr<RestConfig> c =
      LoadKubeconfig({a, (dir_ / "missing").string(), Write("empty", ""), b});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "http://127.0.0.1:8080");
  EXPECT_EQ(c->bearer_token_file, (dir_ / "tok").string());
}

TEST_F(KubeconfigTest, ErrorsNameTheProblem) {
  struct Case {
    std::string text;
    std::string context;
    std::string want;
  } cases[] = {
      {"clusters: []", "", "no current-context"},
      {kConfig, "staging", "context \"staging\" not found"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: nope}}]", "",
       "names cluster \"nope\", which is not defined"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, "
       "cluster: {}}]",
       "", "has no server"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: "
       "[{name: c, cluster: {server: 'https://h'}}]\nusers: [{name: u, user: {exec: {command: "
       "aws}}}]",
       "", "exec credentials are not supported"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, "
       "cluster: {server: 'https://h', certificate-authority-data: '%%%'}}]",
       "", "certificate-authority-data is not base64"},
      {"- just\n- a list", "", "not a kubeconfig"},
      {"key: [unclosed", "", ""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RestConfig> r = LoadKubeconfig({Write("config", c.text)}, c.context);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.want)) << c.text;
  }
  EXPECT_EQ(LoadKubeconfig({(dir_ / "none").string()}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(KubeconfigTest, InClusterReadsTheServiceAccount) {
  std::string sa = "/var/run/secrets/kubernetes.io/serviceaccount/";
  Write(sa.substr(1) + "token", "tok\n");
  Write(sa.substr(1) + "ca.crt", "CA");
  Write(sa.substr(1) + "namespace", "training\n");
  absl::StatusOr<RestConfig> c = InClusterConfig(
      {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}},
      dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->ca_pem, "CA");
  EXPECT_EQ(c->namespace_, "training");
  EXPECT_EQ(c->bearer_token_file, dir_.string() + sa + "token");
  EXPECT_TRUE(c->bearer_token.empty());

  absl::StatusOr<RestConfig> v6 = InClusterConfig(
      {{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "443"}}, dir_.string());
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->server, "https://[fd00::1]:443");

  EXPECT_EQ(InClusterConfig({}, dir_.string()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(InClusterConfig({{"KUBERNETES_SERVICE_HOST", "h"}, {"KUBERNETES_SERVICE_PORT", "1"}},
                               (dir_ / "elsewhere").string())
                   .ok());
}

TEST_F(KubeconfigTest, BearerTokenFileIsReReadAfterItRotates) {
  std::string token = Write("token", "first\n");
  auto inner = std::make_shared<FakeTransport>();
  common::FakeClock clock;
  BearerTokenTransport auth(inner, "", token, &clock);
  auto send = [&] {
    inner->QueueResponse(200, "{}");
    EXPECT_TRUE(auth.Send({.target = "/api"}).ok());
    HttpRequest sent = inner->requests().back();
    const std::string* h = sent.Header("Authorization");
    return h ? *h : std::string();
  };
  EXPECT_EQ(send(), "Bearer first");
  Write("token", "second");
  EXPECT_EQ(send(), "Bearer first");  // cached for a minute
  clock.Advance(BearerTokenTransport::kRefresh);
  EXPECT_EQ(send(), "Bearer second");
  fs::remove(token);
  clock.Advance(BearerTokenTransport::kRefresh);
  EXPECT_EQ(send(), "Bearer second");  // a failed re-read keeps the last good token
}

TEST_F(KubeconfigTest, ConnectRejectsBadServersAndCredentials) {
  common::FakeClock clock;
  EXPECT_EQ(Connect({.server = "ftp://x"}, &clock).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Connect({.server = "not a url"}, &clock).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::shared_ptr<Transport>> bad_ca =
      Connect({.server = "https://127.0.0.1:1", .ca_pem = "not a certificate"}, &clock);
  EXPECT_EQ(bad_ca.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_ca.status().message()), HasSubstr("TLS credentials"));
  EXPECT_EQ(
      Connect({.server = "https://127.0.0.1:1", .client_cert_pem = "x"}, &clock).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Connect({.server = "http://127.0.0.1:1"}, &clock).ok());
}

}  // namespace
}  // namespace lockstep::kube
