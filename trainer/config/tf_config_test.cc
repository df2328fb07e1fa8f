#include "trainer/config/tf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep::trainer {
namespace {

using ::testing::HasSubstr;

TEST(TfConfigTest, ParsesTheKubeflowForm) {
  absl::StatusOr<TfConfig> c = ParseTfConfig(
      R"({"cluster":{"evaluator":["t-evaluator-0.ns3.svc:2222"],"ps":["t-ps-0.ns3.svc:2222"],)"
      R"("worker":["t-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},)"
      R"("environment":"cloud"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->task_type, "worker");
  EXPECT_EQ(c->task_index, 0);
  EXPECT_EQ(c->environment, "cloud");
  EXPECT_EQ(c->Hosts("ps"), std::vector<std::string>{"t-ps-0.ns3.svc:2222"});
  EXPECT_EQ(c->SelfAddress(), "t-worker-0.ns3.svc:2222");
  EXPECT_TRUE(c->Hosts("chief").empty());
}

// A TFJob's Master is TensorFlow 1's chief; a type of 0 replicas is an empty list (as
// training-operator writes both).
TEST(TfConfigTest, ReadsAMasterAsTheChiefAndSkipsEmptyTypes) {
  absl::StatusOr<TfConfig> c =
      ParseTfConfig(R"({"cluster":{"evaluator":[],"master":["t-master-0.ns.svc:2222"],)"
                    R"("worker":["t-worker-0.ns.svc:2222"]},"task":{"type":"master","index":0},)"
                    R"("environment":"cloud"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->task_type, "chief");
  EXPECT_EQ(c->Hosts("chief"), std::vector<std::string>{"t-master-0.ns.svc:2222"});
  EXPECT_EQ(c->SelfAddress(), "t-master-0.ns.svc:2222");
  EXPECT_FALSE(c->cluster.contains("evaluator"));
  EXPECT_FALSE(c->cluster.contains("master"));
}

struct BadCase {
  const char* text;
  const char* expected;
  friend void PrintTo(const BadCase& c, std::ostream* os) { *os << c.text; }
};

class TfConfigBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(TfConfigBadTest, NamesTheProblem) {
  absl::StatusOr<TfConfig> c = ParseTfConfig(GetParam().text);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    All, TfConfigBadTest,
    ::testing::Values(
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"wor)", "not valid JSON"},
        BadCase{"[]", "must be a JSON object"},
        BadCase{R"({"task":{"type":"worker","index":0}})", "cluster"},
        BadCase{R"({"cluster":{"worker":[]},"task":{"type":"worker","index":0}})",
                "cluster: must be a non-empty object"},
        BadCase{R"({"cluster":{"worker":"a:1"},"task":{"type":"worker","index":0}})",
                "cluster.worker: must be a list"},
        BadCase{R"({"cluster":{"worker":{"1":"a:1"},"ps":[]},"task":{"type":"worker","index":1}})",
                "cluster.worker: is the sparse form"},
        BadCase{
            R"({"cluster":{"chief":["a:1"],"master":["b:1"]},"task":{"type":"chief","index":0}})",
            "a chief or a master, not both"},
        BadCase{R"({"cluster":{"worker":["nohostport"]},"task":{"type":"worker","index":0}})",
                "cluster.worker[0]"},
        BadCase{R"({"cluster":{"worker":["a:1"]}})", "task: must be an object"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"ps","index":0}})",
                "\"ps\" is not in cluster"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":3}})",
                "task.index: 3 is out of range"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":-1}})",
                "task.index"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":1e400}})",
                "not valid JSON"}));

}  // namespace
}  // namespace lockstep::trainer
