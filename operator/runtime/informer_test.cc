#include "operator/runtime/informer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "common/testing/fake_clock.h"
#include "operator/kube/pod.h"
#include "operator/kube/testing/fake_transport.h"

namespace lockstep::runtime {
namespace {

using kube::Pod;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

json PodJson(const std::string& ns, const std::string& name, const std::string& rv,
             std::map<std::string, std::string> labels = {}, const std::string& owner = "") {
  json j = {{"kind", "Pod"},
            {"metadata", {{"namespace", ns}, {"name", name}, {"resourceVersion", rv}}}};
  if (!labels.empty()) j["metadata"]["labels"] = labels;
  if (!owner.empty()) {
    j["metadata"]["ownerReferences"] = {{{"apiVersion", "lockstep.io/v1alpha1"},
                                         {"kind", "TrainingJob"},
                                         {"name", "j"},
                                         {"uid", owner}}};
  }
  return j;
}

std::vector<std::string> Names(const std::vector<Cache<Pod>::Ptr>& pods) {
  std::vector<std::string> out;
  for (const auto& p : pods) out.push_back(p->metadata.name);
  std::sort(out.begin(), out.end());
  return out;
}

class InformerTest : public ::testing::Test {
 protected:
  InformerTest() {
    informer_.AddHandlers({
        .on_add = [this](const auto& p) { log_.push_back("add " + p->metadata.name); },
        .on_update =
            [this](const auto& old, const auto& p) {
              log_.push_back("update " + p->metadata.name + " " + old->metadata.resource_version +
                             "->" + p->metadata.resource_version);
            },
        .on_delete = [this](const auto& p) { log_.push_back("delete " + p->metadata.name); },
    });
  }

  std::shared_ptr<kube::FakeTransport> transport_ = std::make_shared<kube::FakeTransport>();
  kube::RestClient client_{transport_};
  common::FakeClock clock_;
  Informer<Pod> informer_{&client_, kube::resources::kPods, kube::DecodePod, {}, &clock_};
  std::vector<std::string> log_;
};

TEST_F(InformerTest, EventsUpdateTheCacheAndCallHandlers) {
  EXPECT_FALSE(informer_.HasSynced());
  informer_.Replace({PodJson("a", "p1", "1"), PodJson("a", "p2", "1")}, "1");
  EXPECT_TRUE(informer_.HasSynced());
  informer_.Apply({kube::WatchEvent::Type::kModified, PodJson("a", "p1", "2")});
  informer_.Apply({kube::WatchEvent::Type::kAdded, PodJson("b", "p3", "3")});
  informer_.Apply({kube::WatchEvent::Type::kDeleted, PodJson("a", "p2", "4")});
  EXPECT_THAT(log_, ElementsAre("add p1", "add p2", "update p1 1->2", "add p3", "delete p2"));
  EXPECT_EQ(informer_.cache().size(), 2u);
  ASSERT_NE(informer_.cache().Get("a/p1"), nullptr);
  EXPECT_EQ(informer_.cache().Get("a/p1")->metadata.resource_version, "2");
  EXPECT_EQ(informer_.cache().Get("a/p2"), nullptr);
}

TEST_F(InformerTest, RelistIsDiffedIntoAddsUpdatesAndDeletes) {
  informer_.Replace(
      {PodJson("a", "keep", "1"), PodJson("a", "change", "1"), PodJson("a", "vanish", "1")}, "1");
  log_.clear();
  // Missed while the watch was down: "change" modified, "vanish" deleted, "new" added.
  informer_.Replace(
      {PodJson("a", "keep", "1"), PodJson("a", "change", "5"), PodJson("a", "new", "6")}, "9");
  EXPECT_THAT(log_, UnorderedElementsAre("update change 1->5", "add new", "delete vanish"));
  EXPECT_EQ(informer_.cache().size(), 3u);
}

TEST_F(InformerTest, ObjectsHandedOutNeverChange) {
  informer_.Replace({PodJson("a", "p", "1")}, "1");
  Cache<Pod>::Ptr held = informer_.cache().Get("a/p");
  informer_.Apply({kube::WatchEvent::Type::kModified, PodJson("a", "p", "2")});
  EXPECT_EQ(held->metadata.resource_version, "1");
  EXPECT_EQ(informer_.cache().Get("a/p")->metadata.resource_version, "2");
}

TEST_F(InformerTest, IndexesByNamespaceOwnerAndLabel) {
  informer_.mutable_cache().AddIndex(kNamespaceIndex, Cache<Pod>::NamespaceIndex());
  informer_.mutable_cache().AddIndex(kLabelIndex, Cache<Pod>::LabelIndex());
  informer_.Replace({PodJson("a", "w0", "1", {{"role", "worker"}}, "job1"),
                     PodJson("a", "w1", "1", {{"role", "worker"}}, "job1"),
                     PodJson("a", "ps0", "1", {{"role", "ps"}}, "job1"),
                     PodJson("b", "w0", "1", {{"role", "worker"}}, "job2")},
                    "1");
  const Cache<Pod>& c = informer_.cache();
  EXPECT_THAT(Names(c.ByIndex(kNamespaceIndex, "a")), ElementsAre("ps0", "w0", "w1"));
  EXPECT_THAT(Names(c.ByIndex(kOwnerIndex, "job2")), ElementsAre("w0"));
  EXPECT_THAT(Names(c.ByIndex(kLabelIndex, "role=worker")), ElementsAre("w0", "w0", "w1"));
  EXPECT_THAT(Names(c.Select("a", *kube::LabelSelector::Parse("role in (worker)"))),
              ElementsAre("w0", "w1"));
  EXPECT_TRUE(c.ByIndex("no-such-index", "x").empty());
  // Updates move objects between index entries; deletes remove them.
  informer_.Apply(
      {kube::WatchEvent::Type::kModified, PodJson("a", "w1", "2", {{"role", "ps"}}, "job1")});
  informer_.Apply({kube::WatchEvent::Type::kDeleted, PodJson("a", "ps0", "3")});
  EXPECT_THAT(Names(c.ByIndex(kLabelIndex, "role=ps")), ElementsAre("w1"));
  EXPECT_THAT(Names(c.ByIndex(kOwnerIndex, "job1")), ElementsAre("w0", "w1"));
  // A relist rebuilds the indexes over the new content; later events keep them right.
  informer_.Replace({PodJson("a", "w1", "4", {{"role", "worker"}}, "job2"),
                     PodJson("b", "w0", "1", {{"role", "worker"}}, "job2"),
                     PodJson("c", "ps0", "4", {{"role", "ps"}}, "job3")},
                    "4");
  EXPECT_TRUE(c.ByIndex(kOwnerIndex, "job1").empty());
  EXPECT_THAT(Names(c.ByIndex(kOwnerIndex, "job2")), ElementsAre("w0", "w1"));
  informer_.Apply({kube::WatchEvent::Type::kDeleted, PodJson("b", "w0", "5")});
  informer_.Apply(
      {kube::WatchEvent::Type::kAdded, PodJson("c", "w9", "6", {{"role", "worker"}}, "job3")});
  EXPECT_THAT(Names(c.ByIndex(kOwnerIndex, "job2")), ElementsAre("w1"));
  EXPECT_THAT(Names(c.ByIndex(kOwnerIndex, "job3")), ElementsAre("ps0", "w9"));
  EXPECT_THAT(Names(c.ByIndex(kNamespaceIndex, "c")), ElementsAre("ps0", "w9"));
  EXPECT_THAT(Names(c.ByIndex(kLabelIndex, "role=worker")), ElementsAre("w1", "w9"));
  // Two owner references with one UID: the object is listed once, and leaves once.
  json twice = PodJson("c", "w9", "7", {{"role", "worker"}}, "job3");
  twice["metadata"]["ownerReferences"].push_back(twice["metadata"]["ownerReferences"][0]);
  informer_.Apply({kube::WatchEvent::Type::kModified, twice});
  EXPECT_THAT(Names(c.ByIndex(kOwnerIndex, "job3")), ElementsAre("ps0", "w9"));
  informer_.Apply({kube::WatchEvent::Type::kDeleted, twice});
  EXPECT_THAT(Names(c.ByIndex(kOwnerIndex, "job3")), ElementsAre("ps0"));
}

TEST_F(InformerTest, UndecodableObjectsAreSkippedAndReported) {
  std::vector<std::string> errors;
  informer_.OnDecodeError([&](const absl::Status& s) { errors.emplace_back(s.message()); });
  informer_.Replace({PodJson("a", "good", "1"), json{{"metadata", 7}}, json::array()}, "1");
  informer_.Apply({kube::WatchEvent::Type::kAdded, json{{"metadata", {{"namespace", "a"}}}}});
  EXPECT_EQ(informer_.cache().size(), 1u);
  EXPECT_EQ(informer_.decode_errors(), 3u);
  EXPECT_EQ(errors.size(), 3u);
}

TEST_F(InformerTest, AThrowingHandlerDoesNotStopTheOthers) {
  Informer<Pod> informer(&client_, kube::resources::kPods, kube::DecodePod, {}, &clock_);
  int seen = 0;
  informer.AddHandlers({.on_add = [](const auto&) { throw std::runtime_error("handler bug"); }});
  informer.AddHandlers({.on_add = [&](const auto&) { ++seen; }});
  informer.Replace({PodJson("a", "p1", "1"), PodJson("a", "p2", "1")}, "1");
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(informer.cache().size(), 2u);
}

TEST_F(InformerTest, RunsAgainstAServerAndSyncs) {
  transport_->QueueResponse(
      200,
      json{{"metadata", {{"resourceVersion", "4"}}}, {"items", {PodJson("a", "p", "4")}}}.dump());
  std::shared_ptr<kube::FakeBody> body = transport_->QueueStream();
  std::jthread run([&](std::stop_token stop) { informer_.Run(stop); });
  std::stop_source never;
  ASSERT_TRUE(informer_.WaitForSync(never.get_token()));
  EXPECT_NE(informer_.cache().Get("a/p"), nullptr);
  transport_->WaitForRequests(2);  // the watch is open
  run.request_stop();
  run.join();
  EXPECT_TRUE(body->cancelled());
}

}  // namespace
}  // namespace lockstep::runtime
