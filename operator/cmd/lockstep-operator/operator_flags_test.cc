#include "operator/cmd/lockstep-operator/operator_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep::cmd {
namespace {

using ::testing::HasSubstr;

TEST(OperatorFlagsTest, Defaults) {
  absl::StatusOr<OperatorFlags> f = ParseOperatorFlags({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->workers, 4);
  EXPECT_EQ(f->qps, 500);
  EXPECT_EQ(f->burst, 500);
  EXPECT_EQ(f->event_qps, 50);
  EXPECT_EQ(f->event_burst, 100);
  EXPECT_EQ(f->metrics_addr, ":8080");
  EXPECT_FALSE(f->leader_elect);
  EXPECT_FALSE(f->tfjob);
  EXPECT_EQ(f->gang, trainingjob::GangScheduler::kNone);
  EXPECT_EQ(f->progress_interval, absl::Seconds(10));
}

TEST(OperatorFlagsTest, EveryFlag) {
  absl::StatusOr<OperatorFlags> f = ParseOperatorFlags(
      {"--kubeconfig=/k", "--context", "c", "--namespace=ml", "--workers=8", "--qps=50.5",
       "--burst=100", "--event-qps=2.5", "--event-burst=7", "--cluster-domain=cluster.local",
       "--gang-scheduler=volcano", "--leader-elect", "--leader-election-namespace=ops",
       "--leader-election-id=lk", "--metrics-addr=127.0.0.1:9090", "--progress-interval=30s",
       "--log-format=json", "--tfjob"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->kubeconfig, "/k");
  EXPECT_EQ(f->context, "c");
  EXPECT_EQ(f->namespace_, "ml");
  EXPECT_EQ(f->workers, 8);
  EXPECT_EQ(f->qps, 50.5);
  EXPECT_EQ(f->burst, 100);
  EXPECT_EQ(f->event_qps, 2.5);
  EXPECT_EQ(f->event_burst, 7);
  EXPECT_EQ(f->cluster_domain, "cluster.local");
  EXPECT_EQ(f->gang, trainingjob::GangScheduler::kVolcano);
  EXPECT_TRUE(f->leader_elect);
  EXPECT_EQ(f->leader_election_namespace, "ops");
  EXPECT_EQ(f->leader_election_id, "lk");
  EXPECT_EQ(f->metrics_addr, "127.0.0.1:9090");
  EXPECT_EQ(f->progress_interval, absl::Seconds(30));
  EXPECT_TRUE(f->json_logs);
  EXPECT_TRUE(f->tfjob);
  EXPECT_EQ(ParseOperatorFlags({"--gang-scheduler=scheduler-plugins"})->gang,
            trainingjob::GangScheduler::kSchedulerPlugins);
  EXPECT_EQ(ParseOperatorFlags({"--metrics-addr=0"})->metrics_addr, "");
  EXPECT_FALSE(ParseOperatorFlags({"--leader-elect=false"})->leader_elect);
}

TEST(OperatorFlagsTest, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {{"--workers=0"}, "--workers"},
           {{"--workers=abc"}, "--workers"},
           {{"--qps=-1"}, "--qps"},
           {{"--burst=1.5"}, "--burst"},
           {{"--event-qps=0"}, "--event-qps"},
           {{"--event-burst=-3"}, "--event-burst"},
           {{"--gang-scheduler=kube-batch"}, "--gang-scheduler"},
           {{"--progress-interval=soon"}, "--progress-interval"},
           {{"--log-format=xml"}, "--log-format"},
           {{"--leader-elect=maybe"}, "--leader-elect"},
           {{"--namespace"}, "--namespace needs a value"},
           {{"--frobnicate"}, "unknown flag --frobnicate"},
           {{"stray"}, "unexpected argument"},
       }) {
    absl::StatusOr<OperatorFlags> f = ParseOperatorFlags(c.args);
    ASSERT_FALSE(f.ok()) << c.args[0];
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.want));
  }
}

}  // namespace
}  // namespace lockstep::cmd
