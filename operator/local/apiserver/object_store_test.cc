#include "operator/local/apiserver/object_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace lockstep::local {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json Obj(const std::string& name, int v = 0) {
  return {{"metadata", {{"name", name}}}, {"spec", {{"v", v}}}};
}

TEST(ObjectStoreTest, VersionsAndPreconditions) {
  auto store = ObjectStore::Open("").value();
  std::string key = StoreKey("pods", "ns", "a");
  absl::StatusOr<ObjectPtr> a = store->Put(key, Obj("a"), "-");
  ASSERT_TRUE(a.ok());
  std::string rv1 = (**a)["metadata"]["resourceVersion"];
  EXPECT_EQ(store->Put(key, Obj("a"), "-").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store->Put(key, Obj("a", 1), "999").status().code(), absl::StatusCode::kAborted);
  absl::StatusOr<ObjectPtr> b = store->Put(key, Obj("a", 1), rv1);
  ASSERT_TRUE(b.ok());
  EXPECT_GT(std::stoll((**b)["metadata"]["resourceVersion"].get<std::string>()), std::stoll(rv1));
  EXPECT_EQ(store->Put(StoreKey("pods", "ns", "zz"), Obj("zz"), "5").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Remove(key, rv1).status().code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(store->Remove(key).ok());
  EXPECT_EQ(store->Get(key), nullptr);
  EXPECT_EQ(store->Remove(key).status().code(), absl::StatusCode::kNotFound);
}

TEST(ObjectStoreTest, DependentsFollowOwnerReferencesThroughUpdatesAndRemoval) {
  auto store = ObjectStore::Open("").value();
  auto owned = [](const std::string& name, std::vector<std::string> owners) {
    json o = Obj(name);
    o["metadata"]["ownerReferences"] = json::array();
    for (const std::string& uid : owners) {
      o["metadata"]["ownerReferences"].push_back({{"uid", uid}, {"name", "job"}});
    }
    return o;
  };
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "a"), owned("a", {"u1"}), "-").ok());
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "b"), owned("b", {"u1", "u2"}), "-").ok());
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "c"), Obj("c"), "-").ok());
  auto keys = [&](const std::string& uid) {
    std::vector<std::string> out;
    for (const auto& [k, o] : store->Dependents(uid)) out.push_back(k);
    return out;
  };
  EXPECT_EQ(keys("u1"), (std::vector<std::string>{"pods/ns/a", "pods/ns/b"}));
  EXPECT_EQ(keys("u2"), (std::vector<std::string>{"pods/ns/b"}));
  // An update that drops an owner, and a removal, leave the index.
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "b"), owned("b", {"u2"}), "").ok());
  ASSERT_TRUE(store->Remove(StoreKey("pods", "ns", "a")).ok());
  EXPECT_TRUE(keys("u1").empty());
  EXPECT_EQ(keys("u2"), (std::vector<std::string>{"pods/ns/b"}));
}

TEST(ObjectStoreTest, ListByPrefixInKeyOrder) {
  auto store = ObjectStore::Open("").value();
  for (const char* n : {"b", "a", "c"})
    ASSERT_TRUE(store->Put(StoreKey("pods", "x", n), Obj(n), "-").ok());
  ASSERT_TRUE(store->Put(StoreKey("pods", "y", "a"), Obj("a"), "-").ok());
  ASSERT_TRUE(store->Put(StoreKey("podsx", "x", "a"), Obj("a"), "-").ok());
  auto [items, rv] = store->List(StorePrefix("pods", "x"));
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].first, "pods/x/a");
  EXPECT_EQ(items[2].first, "pods/x/c");
  EXPECT_EQ(store->List(StorePrefix("pods", "")).first.size(), 4u);
  EXPECT_EQ(rv, store->resource_version());
  // Any: the same prefix rule, without a copy.
  EXPECT_TRUE(store->Any(StorePrefix("pods", "y")));
  EXPECT_FALSE(store->Any(StorePrefix("pods", "z")));
  EXPECT_FALSE(store->Any(StorePrefix("po", "x")));  // "po/x/" is no prefix of "pods/x/a"
  ASSERT_TRUE(store->Remove(StoreKey("pods", "y", "a")).ok());
  EXPECT_FALSE(store->Any(StorePrefix("pods", "y")));
}

TEST(ObjectStoreTest, WatchFromAVersionThenLiveAndGoneBeyondHistory) {
  auto store = ObjectStore::Open("", /*history=*/3).value();
  std::string key = StoreKey("pods", "ns", "a");
  ASSERT_TRUE(store->Put(key, Obj("a", 1), "").ok());
  int64_t after_first = store->resource_version();
  ASSERT_TRUE(store->Put(key, Obj("a", 2), "").ok());
  ASSERT_TRUE(store->Put(StoreKey("svc", "ns", "a"), Obj("a"), "").ok());  // other prefix
  auto w = store->Watch(StorePrefix("pods", "ns"), after_first);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(store->Remove(key).ok());
  std::vector<StoreEvent> events = (*w)->Next(std::chrono::milliseconds(0));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, StoreEvent::Type::kModified);
  EXPECT_EQ((*events[0].object)["spec"]["v"], 2);
  EXPECT_EQ((*events[0].old_object)["spec"]["v"], 1);
  EXPECT_EQ(events[1].type, StoreEvent::Type::kDeleted);
  EXPECT_EQ((*events[1].object)["metadata"]["resourceVersion"],
            std::to_string(events[1].resource_version));
  // History holds 3 events; the first write has left it.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->Put(key, Obj("a", i), "").ok());
  EXPECT_EQ(store->Watch("pods/", after_first).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ObjectStoreTest, WatchWithoutAVersionStartsWithTheCurrentState) {
  auto store = ObjectStore::Open("").value();
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "a"), Obj("a"), "").ok());
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "b"), Obj("b"), "").ok());
  auto w = store->Watch("pods/", std::nullopt);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "c"), Obj("c"), "").ok());
  std::vector<StoreEvent> events = (*w)->Next(std::chrono::milliseconds(0));
  ASSERT_EQ(events.size(), 3u);
  for (const StoreEvent& e : events) EXPECT_EQ(e.type, StoreEvent::Type::kAdded);
  EXPECT_EQ(events[2].key, "pods/ns/c");
}

TEST(ObjectStoreTest, StateSurvivesARestartAndATornLastLine) {
  fs::path dir = fs::temp_directory_path() / ("lockstep-store-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  int64_t rv;
  {
    auto store = ObjectStore::Open(dir.string()).value();
    ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "a"), Obj("a", 1), "").ok());
    ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "b"), Obj("b"), "").ok());
    ASSERT_TRUE(store->Remove(StoreKey("pods", "ns", "b")).ok());
    ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "a"), Obj("a", 2), "").ok());
    rv = store->resource_version();
  }
  std::ofstream(dir / "objects.log", std::ios::app) << "{\"rv\":99,\"op\":\"put\",\"key\":";
  {
    auto store = ObjectStore::Open(dir.string()).value();
    EXPECT_EQ(store->resource_version(), rv);
    ObjectPtr a = store->Get(StoreKey("pods", "ns", "a"));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ((*a)["spec"]["v"], 2);
    EXPECT_EQ(store->Get(StoreKey("pods", "ns", "b")), nullptr);
    // Versions keep growing across restarts; watches from before the restart are Gone.
    EXPECT_EQ(store->Watch("pods/", rv - 1).status().code(), absl::StatusCode::kOutOfRange);
    ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "c"), Obj("c"), "").ok());
    EXPECT_EQ(store->resource_version(), rv + 1);
  }
  fs::remove_all(dir);
}

TEST(ObjectStoreTest, AWatcherThatFallsTooFarBehindIsClosed) {
  // A queue of 100 events (the server's is 100,000): the 100th write still queues, the 101st
  // closes the watch; a watcher that keeps up stays open.
  auto store = ObjectStore::Open("", 10000, 100).value();
  auto slow = store->Watch("pods/", std::nullopt).value();
  auto quick = store->Watch("pods/", std::nullopt).value();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "a"), Obj("a", i), "").ok());
    if (i % 10 == 9) {
      EXPECT_EQ(quick->Next(std::chrono::milliseconds(0)).size(), 10u);
    }
  }
  EXPECT_FALSE(slow->closed());
  ASSERT_TRUE(store->Put(StoreKey("pods", "ns", "a"), Obj("a", 100), "").ok());
  EXPECT_TRUE(slow->closed());
  EXPECT_FALSE(quick->closed());
}

}  // namespace
}  // namespace lockstep::local
