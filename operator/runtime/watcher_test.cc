#include "operator/runtime/watcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "common/testing/fake_clock.h"
#include "operator/kube/api_error.h"
#include "operator/kube/testing/fake_transport.h"

namespace lockstep::runtime {
namespace {

using kube::WatchEvent;
using Kind = WatcherAction::Kind;
using State = WatcherMachine::State;
using nlohmann::json;

const BackoffPolicy kExact{.initial = absl::Seconds(1), .max = absl::Seconds(4), .factor = 2};

WatchEvent Event(WatchEvent::Type type, const std::string& rv) {
  return {type, {{"metadata", {{"name", "p"}, {"resourceVersion", rv}}}}};
}

absl::Status Gone() {
  return kube::ErrorFromStatusObject({{"code", 410}, {"reason", "Expired"}}, "watch");
}

TEST(WatcherMachineTest, ListThenWatchFromTheListsVersion) {
  WatcherMachine m(kExact);
  EXPECT_EQ(m.Start().kind, Kind::kList);
  EXPECT_EQ(m.state(), State::kListing);
  WatcherAction a = m.OnListed("100");
  EXPECT_EQ(a.kind, Kind::kWatch);
  EXPECT_EQ(a.resource_version, "100");
  EXPECT_EQ(m.state(), State::kWatching);
}

TEST(WatcherMachineTest, EventsAdvanceTheVersionAndBookmarksAreNotDelivered) {
  WatcherMachine m(kExact);
  m.Start();
  m.OnListed("100");
  EXPECT_EQ(m.OnEvent(Event(WatchEvent::Type::kAdded, "101")).kind, Kind::kDeliver);
  EXPECT_EQ(m.OnEvent(Event(WatchEvent::Type::kModified, "102")).kind, Kind::kDeliver);
  EXPECT_EQ(m.OnEvent(Event(WatchEvent::Type::kDeleted, "103")).kind, Kind::kDeliver);
  EXPECT_EQ(m.resource_version(), "103");
  EXPECT_EQ(m.OnEvent(Event(WatchEvent::Type::kBookmark, "150")).kind, Kind::kIgnore);
  EXPECT_EQ(m.resource_version(), "150");
  EXPECT_EQ(m.state(), State::kWatching);
}

TEST(WatcherMachineTest, CleanEndRewatchesFromTheLastVersionWithoutWaiting) {
  WatcherMachine m(kExact);
  m.Start();
  m.OnListed("100");
  m.OnEvent(Event(WatchEvent::Type::kAdded, "105"));
  WatcherAction a = m.OnWatchEnded();
  EXPECT_EQ(a.kind, Kind::kWatch);
  EXPECT_EQ(a.resource_version, "105");
}

TEST(WatcherMachineTest, BrokenWatchBacksOffThenResumesFromTheLastVersion) {
  WatcherMachine m(kExact);
  m.Start();
  m.OnListed("100");
  m.OnEvent(Event(WatchEvent::Type::kAdded, "101"));
  WatcherAction a = m.OnWatchFailed(absl::UnavailableError("reset"));
  EXPECT_EQ(a.kind, Kind::kWait);
  EXPECT_EQ(a.wait, absl::Seconds(1));
  EXPECT_EQ(m.state(), State::kWatchBackoff);
  a = m.OnWaitOver();
  EXPECT_EQ(a.kind, Kind::kWatch);
  EXPECT_EQ(a.resource_version, "101");
  // Repeated failures double the wait up to the cap.
  EXPECT_EQ(m.OnWatchFailed(absl::UnavailableError("x")).wait, absl::Seconds(2));
  m.OnWaitOver();
  EXPECT_EQ(m.OnWatchFailed(absl::UnavailableError("x")).wait, absl::Seconds(4));
  m.OnWaitOver();
  EXPECT_EQ(m.OnWatchFailed(absl::UnavailableError("x")).wait, absl::Seconds(4));
  m.OnWaitOver();
  // A watch that delivers resets the backoff.
  m.OnEvent(Event(WatchEvent::Type::kModified, "102"));
  EXPECT_EQ(m.OnWatchFailed(absl::UnavailableError("x")).wait, absl::Seconds(1));
}

TEST(WatcherMachineTest, GoneRelistsAtOnce) {
  for (bool as_event : {false, true}) {
    WatcherMachine m(kExact);
    m.Start();
    m.OnListed("100");
    WatcherAction a = as_event
                          ? m.OnEvent({WatchEvent::Type::kError,
                                       {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}}})
                          : m.OnWatchFailed(Gone());
    EXPECT_EQ(a.kind, Kind::kList);
    EXPECT_EQ(m.state(), State::kListing);
    EXPECT_EQ(m.resource_version(), "");
  }
}

TEST(WatcherMachineTest, OtherErrorEventsBackOff) {
  WatcherMachine m(kExact);
  m.Start();
  m.OnListed("100");
  WatcherAction a = m.OnEvent(
      {WatchEvent::Type::kError, {{"kind", "Status"}, {"code", 500}, {"reason", "InternalError"}}});
  EXPECT_EQ(a.kind, Kind::kWait);
  EXPECT_EQ(m.state(), State::kWatchBackoff);
}

TEST(WatcherMachineTest, ListFailuresBackOffAndRetryTheList) {
  WatcherMachine m(kExact);
  m.Start();
  WatcherAction a = m.OnListFailed(absl::UnavailableError("down"));
  EXPECT_EQ(a.kind, Kind::kWait);
  EXPECT_EQ(m.state(), State::kListBackoff);
  EXPECT_EQ(m.OnWaitOver().kind, Kind::kList);
  EXPECT_EQ(m.OnListFailed(absl::UnavailableError("down")).wait, absl::Seconds(2));
  m.OnWaitOver();
  m.OnListed("7");
  m.OnWatchEnded();
  EXPECT_EQ(m.OnWatchFailed(absl::UnavailableError("x")).wait, absl::Seconds(1));  // reset
}

TEST(WatcherMachineTest, AListWithoutAVersionIsAFailure) {
  WatcherMachine m(kExact);
  m.Start();
  EXPECT_EQ(m.OnListed("").kind, Kind::kWait);
  EXPECT_EQ(m.state(), State::kListBackoff);
}

// The driver, against a scripted API server.
class RecordingSink final : public WatchSink {
 public:
  void Replace(std::vector<json> items, const std::string& rv) override {
    std::lock_guard lock(mu_);
    log_.push_back("REPLACE " + std::to_string(items.size()) + "@" + rv);
    cv_.notify_all();
  }
  void Apply(WatchEvent e) override {
    std::lock_guard lock(mu_);
    log_.push_back(std::string(kube::WatchEventTypeName(e.type)) + " " +
                   e.object["metadata"]["resourceVersion"].get<std::string>());
    cv_.notify_all();
  }
  void WaitFor(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return log_.size() >= n; });
  }
  std::vector<std::string> log() {
    std::lock_guard lock(mu_);
    return log_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
};

std::string Line(const char* type, const std::string& rv) {
  return json{{"type", type}, {"object", {{"metadata", {{"name", "p"}, {"resourceVersion", rv}}}}}}
             .dump() +
         "\n";
}

std::string List(const std::string& rv, int n) {
  json items = json::array();
  for (int i = 0; i < n; ++i) {
    items.push_back({{"metadata", {{"name", "p" + std::to_string(i)}, {"resourceVersion", rv}}}});
  }
  return json{{"metadata", {{"resourceVersion", rv}}}, {"items", items}}.dump();
}

class WatcherTest : public ::testing::Test {
 protected:
  void Start() {
    thread_ = std::jthread([this](std::stop_token stop) { watcher_.Run(stop); });
  }
  void TearDown() override {
    thread_.request_stop();
    transport_->Close();
  }
  std::string Target(size_t i) { return transport_->requests().at(i).target; }

  std::shared_ptr<kube::FakeTransport> transport_ = std::make_shared<kube::FakeTransport>();
  kube::RestClient client_{transport_};
  common::FakeClock clock_;
  RecordingSink sink_;
  Watcher watcher_{&client_,
                   kube::resources::kPods,
                   {.namespace_ = "ns", .rotation = absl::Minutes(5), .backoff = kExact},
                   &clock_,
                   &sink_};
  std::jthread thread_;
};

TEST_F(WatcherTest, DroppedConnectionResumesWithoutLosingAnEvent) {
  transport_->QueueResponse(200, List("10", 2));
  std::shared_ptr<kube::FakeBody> first = transport_->QueueStream();
  Start();
  sink_.WaitFor(1);
  first->Push(Line("ADDED", "11") + Line("MODIFIED", "12"));
  sink_.WaitFor(3);
  first->Fail(absl::UnavailableError("connection reset by peer"));
  clock_.WaitForTimerWithin(absl::Seconds(1));  // the backoff sleep
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Seconds(1));
  std::shared_ptr<kube::FakeBody> second = transport_->QueueStream();
  clock_.Advance(absl::Seconds(1));
  transport_->WaitForRequests(3);
  EXPECT_THAT(Target(2), ::testing::HasSubstr("resourceVersion=12"));
  second->Push(Line("DELETED", "13"));
  sink_.WaitFor(4);
  EXPECT_THAT(sink_.log(),
              ::testing::ElementsAre("REPLACE 2@10", "ADDED 11", "MODIFIED 12", "DELETED 13"));
}

TEST_F(WatcherTest, GoneRelistsAndReplaces) {
  transport_->QueueResponse(200, List("10", 1));
  std::shared_ptr<kube::FakeBody> first = transport_->QueueStream();
  transport_->QueueResponse(200, List("50", 3));
  std::shared_ptr<kube::FakeBody> second = transport_->QueueStream();
  Start();
  sink_.WaitFor(1);
  first->Push(R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})"
              "\n");
  sink_.WaitFor(2);
  transport_->WaitForRequests(4);
  EXPECT_EQ(Target(2), "/api/v1/namespaces/ns/pods?limit=500");
  EXPECT_THAT(Target(3), ::testing::HasSubstr("resourceVersion=50"));
  EXPECT_THAT(sink_.log(), ::testing::ElementsAre("REPLACE 1@10", "REPLACE 3@50"));
}

TEST_F(WatcherTest, BookmarkVersionIsUsedForTheNextWatch) {
  transport_->QueueResponse(200, List("10", 0));
  std::shared_ptr<kube::FakeBody> first = transport_->QueueStream();
  std::shared_ptr<kube::FakeBody> second = transport_->QueueStream();
  Start();
  sink_.WaitFor(1);
  first->Push(Line("BOOKMARK", "77"));
  first->End();
  transport_->WaitForRequests(3);
  EXPECT_THAT(Target(2), ::testing::HasSubstr("resourceVersion=77"));
  EXPECT_EQ(sink_.log().size(), 1u);  // bookmarks are not delivered
}

TEST_F(WatcherTest, ListFailuresBackOffWithTheFakeClock) {
  transport_->QueueError(absl::UnavailableError("refused"));
  transport_->QueueResponse(500, "<html>oops</html>");
  transport_->QueueResponse(200, R"({"metadata":7,"items":"not a list"})");
  transport_->QueueResponse(200, List("5", 1));
  transport_->QueueStream();
  Start();
  clock_.WaitForTimers(1);
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Seconds(1));
  clock_.Advance(absl::Seconds(1));
  transport_->WaitForRequests(2);
  clock_.WaitForTimers(1);
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Seconds(2));
  clock_.Advance(absl::Seconds(2));
  transport_->WaitForRequests(3);  // a list with no resourceVersion is a failure too
  clock_.WaitForTimers(1);
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Seconds(4));
  clock_.Advance(absl::Seconds(4));
  sink_.WaitFor(1);
  EXPECT_EQ(sink_.log()[0], "REPLACE 1@5");
}

TEST_F(WatcherTest, MalformedEventBacksOffAndResumes) {
  transport_->QueueResponse(200, List("10", 0));
  std::shared_ptr<kube::FakeBody> first = transport_->QueueStream();
  Start();
  sink_.WaitFor(1);
  first->Push(Line("ADDED", "11") + "{garbage\n" + Line("ADDED", "12"));
  sink_.WaitFor(2);
  clock_.WaitForTimerWithin(absl::Seconds(1));
  std::shared_ptr<kube::FakeBody> second = transport_->QueueStream();
  clock_.Advance(absl::Seconds(1));
  transport_->WaitForRequests(3);
  EXPECT_THAT(Target(2), ::testing::HasSubstr("resourceVersion=11"));
  second->Push(Line("ADDED", "12"));
  sink_.WaitFor(3);
  EXPECT_THAT(sink_.log(), ::testing::ElementsAre("REPLACE 0@10", "ADDED 11", "ADDED 12"));
}

TEST_F(WatcherTest, ClientRotatesAWatchTheServerDoesNotEnd) {
  transport_->QueueResponse(200, List("10", 0));
  std::shared_ptr<kube::FakeBody> first = transport_->QueueStream();
  std::shared_ptr<kube::FakeBody> second = transport_->QueueStream();
  Start();
  transport_->WaitForRequests(2);
  clock_.WaitForTimers(1);
  std::string target = Target(1);
  size_t at = target.find("timeoutSeconds=");
  ASSERT_NE(at, std::string::npos);
  int64_t timeout = std::stoll(target.substr(at + 15));
  EXPECT_GE(timeout, 300);
  EXPECT_LT(timeout, 600);
  EXPECT_EQ(clock_.NextDeadline() - clock_.Monotonic(), absl::Seconds(timeout + 30));
  clock_.Advance(absl::Seconds(timeout + 30));
  transport_->WaitForRequests(3);
  EXPECT_TRUE(first->cancelled());
  EXPECT_THAT(Target(2), ::testing::HasSubstr("resourceVersion=10"));
}

TEST_F(WatcherTest, StopEndsABlockedWatch) {
  transport_->QueueResponse(200, List("10", 0));
  std::shared_ptr<kube::FakeBody> body = transport_->QueueStream();
  Start();
  transport_->WaitForRequests(2);
  thread_.request_stop();
  thread_.join();
  EXPECT_TRUE(body->cancelled());
}

}  // namespace
}  // namespace lockstep::runtime
