// The CPUs a process may use: cgroup v2's cpu.max and v1's CFS files parsed, the tightest limit
// on the way up a v2 hierarchy taken, rounded up, and capped by the affinity mask. The
// hierarchy is a folder the test lays out, as a Kubernetes node nests a pod's container.
#include "trainer/config/cpu_limit.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

TEST(CpuLimitTest, ParsesCgroupFiles) {
  EXPECT_EQ(CpuMaxLimit("max 100000\n"), std::nullopt);
  EXPECT_EQ(CpuMaxLimit("150000 100000\n"), 1.5);
  EXPECT_EQ(CpuMaxLimit("400000 100000"), 4.0);
  EXPECT_EQ(CpuMaxLimit(""), std::nullopt);
  EXPECT_EQ(CpuMaxLimit("lots 100000"), std::nullopt);
  EXPECT_EQ(CpuMaxLimit("100000 0"), std::nullopt);
  EXPECT_EQ(CfsLimit("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(CfsLimit("250000\n", "100000\n"), 2.5);
  EXPECT_EQ(CfsLimit("x", "100000"), std::nullopt);
  EXPECT_EQ(EnvCpuLimit("2"), 2.0);
  EXPECT_EQ(EnvCpuLimit("0.5\n"), 0.5);
  EXPECT_EQ(EnvCpuLimit(""), std::nullopt);
  EXPECT_EQ(EnvCpuLimit("0"), std::nullopt);
  EXPECT_EQ(EnvCpuLimit("-1"), std::nullopt);
  EXPECT_EQ(EnvCpuLimit("2 CPUs"), std::nullopt);
  EXPECT_EQ(EnvCpuLimit("inf"), std::nullopt);
}

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(CpuLimitTest, TakesTheTightestLimitUpTheHierarchyCappedByTheAffinityMask) {
  testing::TempDir root("cpu-limit");
  const std::string top = root.path().string(), pod = "/kubepods/pod1/trainer";
  const fs::path leaf = root.path() / "kubepods/pod1/trainer";

  // No file anywhere: the affinity mask alone.
  const CpuLimit none = ReadCpuLimit(top, pod);
  EXPECT_EQ(none.quota, std::nullopt);
  EXPECT_EQ(none.cpus, none.affinity);
  EXPECT_GE(none.cpus, 1);

  // 1.5 CPUs on the container's cgroup, none above: rounded up to 2, within the mask.
  Write(root.path() / "cpu.max", "max 100000\n");
  Write(leaf / "cpu.max", "150000 100000\n");
  const CpuLimit own = ReadCpuLimit(top, pod);
  EXPECT_EQ(own.quota, 1.5);
  EXPECT_EQ(own.cpus, std::min(2, none.affinity));
  EXPECT_NE(own.Describe().find("the cgroup's CPU limit 1.5 of "), std::string::npos)
      << own.Describe();

  // A tighter limit on the pod's cgroup wins, and half a CPU still gives one thread.
  Write(root.path() / "kubepods/pod1/cpu.max", "50000 100000\n");
  const CpuLimit pod_limit = ReadCpuLimit(top, pod);
  EXPECT_EQ(pod_limit.quota, 0.5);
  EXPECT_EQ(pod_limit.cpus, 1);

  // A cgroup namespace's root ("/", a container's own view) reads the root's file.
  Write(root.path() / "cpu.max", "300000 100000\n");
  EXPECT_EQ(ReadCpuLimit(top, "/").quota, 3.0);
}

TEST(CpuLimitTest, LockstepLocalsShareCapsLikeACgroupLimit) {
  testing::TempDir root("cpu-limit-env");
  const std::string top = root.path().string();
  const CpuLimit none = ReadCpuLimit(top, "/");
  // lockstep local's share alone (no cgroup files): 1.5 rounds up to 2, within the mask.
  const CpuLimit share = ReadCpuLimit(top, "/", "1.5");
  EXPECT_EQ(share.env_limit, 1.5);
  EXPECT_EQ(share.cpus, std::min(2, none.affinity));
  EXPECT_NE(share.Describe().find("LOCKSTEP_CPU_LIMIT=1.5 of "), std::string::npos)
      << share.Describe();
  // Beside a cgroup limit the tighter one wins, whichever it is.
  Write(root.path() / "cpu.max", "300000 100000\n");
  EXPECT_EQ(ReadCpuLimit(top, "/", "1").cpus, 1);
  EXPECT_EQ(ReadCpuLimit(top, "/", "64").cpus, std::min(3, none.affinity));
  EXPECT_NE(ReadCpuLimit(top, "/", "1").Describe().find("the cgroup's CPU limit 3 and "),
            std::string::npos);
  // A value that is not a positive number is no limit.
  EXPECT_EQ(ReadCpuLimit(top, "/", "lots").env_limit, std::nullopt);
}

}  // namespace
}  // namespace lockstep::trainer
