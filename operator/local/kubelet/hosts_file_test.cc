#include "operator/local/kubelet/hosts_file.h"

#include <gtest/gtest.h>

namespace lockstep::local {
namespace {

using nlohmann::json;

TEST(HostsFileTest, PodsHostnamesSubdomainsAndSelectedServices) {
  json a = {{"metadata", {{"labels", {{"job", "t"}, {"role", "worker"}}}}},
            {"spec", {{"hostname", "w0"}, {"subdomain", "t"}}}};
  json b = {{"metadata", {{"labels", {{"job", "t"}}}}}, {"spec", json::object()}};
  json other_ns = {{"metadata", {{"labels", {{"job", "t"}}}}}, {"spec", json::object()}};
  json svc = {{"spec", {{"selector", {{"role", "worker"}}}}}};
  json headless_all = {{"spec", {{"selector", {{"job", "t"}}}}}};
  json no_selector = {{"spec", json::object()}};
  std::string text = HostsFile(
      {{"ns", "t-worker-0", "127.0.0.2", &a},
       {"ns", "t-chief-0", "127.0.0.3", &b},
       {"other", "x", "127.0.0.4", &other_ns}},
      {{"ns", "t-worker-0", &svc}, {"ns", "all", &headless_all}, {"ns", "none", &no_selector}});
  EXPECT_EQ(text,
            "127.0.0.1\tlocalhost\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\n"
            "127.0.0.2\tall\tall.ns\tall.ns.svc\tall.ns.svc.cluster.local\tt-worker-0\t"
            "t-worker-0.ns\tt-worker-0.ns.svc\tt-worker-0.ns.svc.cluster.local\tw0\tw0.t.ns\t"
            "w0.t.ns.svc\tw0.t.ns.svc.cluster.local\n"
            "127.0.0.3\tall\tall.ns\tall.ns.svc\tall.ns.svc.cluster.local\tt-chief-0\n"
            "127.0.0.4\tx\n");
}

}  // namespace
}  // namespace lockstep::local
