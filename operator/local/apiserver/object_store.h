#pragma once
// ObjectStore: every object of the local API server, with one resourceVersion counter (as
// etcd's revision), an event history for watches, and durable storage.
//
// Keys are "<group-resource>/<namespace>/<name>" ("pods/default/web-0"; "namespaces//default"
// for cluster-scoped objects). Objects are immutable once stored (shared_ptr<const json>);
// a write replaces the pointer. Every write gets the next resourceVersion, is appended to the
// state directory's log and fsync'ed before the call returns, then reaches watchers in
// resourceVersion order. The last `history` events are kept so that a watch can resume from
// any version inside that window; older versions are Gone.
// Thread-safety: thread-safe.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace lockstep::local {

using ObjectPtr = std::shared_ptr<const nlohmann::json>;

struct StoreEvent {
  enum class Type { kAdded, kModified, kDeleted };
  Type type;
  int64_t resource_version;
  std::string key;
  ObjectPtr object;      // the new state (for kDeleted: the last state)
  ObjectPtr old_object;  // the state before (null for kAdded)
};

// "<group-resource>/<namespace>/<name>", and the prefix of a collection.
std::string StoreKey(const std::string& group_resource, const std::string& ns,
                     const std::string& name);
std::string StorePrefix(const std::string& group_resource, const std::string& ns);

// A watcher's queue of events, filled by the store and drained by the HTTP layer.
class Subscription {
 public:
  // Waits up to `timeout` for events; empty when none came (or the store closed).
  std::vector<StoreEvent> Next(std::chrono::milliseconds timeout);
  bool closed() const;
  void Close();

 private:
  friend class ObjectStore;
  void Push(const StoreEvent& e);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StoreEvent> events_;
  bool closed_ = false;
  std::string prefix_;
  size_t max_queued_ = 0;  // a watcher this far behind is closed; it relists (set by Watch)
};

class ObjectStore {
 public:
  // Opens (creating) the state directory and replays its log; "" keeps state in memory only.
  // A watcher with `watch_queue` events not yet taken is closed (it relists).
  static absl::StatusOr<std::unique_ptr<ObjectStore>> Open(const std::string& state_dir,
                                                           size_t history = 10000,
                                                           size_t watch_queue = 100000);
  ~ObjectStore();

  ObjectPtr Get(const std::string& key) const;
  // Objects whose key starts with `prefix`, in key order, and the version they were read at.
  std::pair<std::vector<std::pair<std::string, ObjectPtr>>, int64_t> List(
      const std::string& prefix) const;
  // Whether any object's key starts with `prefix` (without copying them out).
  bool Any(const std::string& prefix) const;
  int64_t resource_version() const;
  // Objects with an ownerReference to `owner_uid` (an index, for cascading deletion).
  std::vector<std::pair<std::string, ObjectPtr>> Dependents(const std::string& owner_uid) const;

  // Stores `object` (its metadata.resourceVersion is set here) if the current object's
  // resourceVersion equals `expect_rv` ("" = any, "-" = must not exist). Returns the stored
  // object, or kAlreadyExists / kNotFound / kAborted (stale version) / kUnavailable (disk).
  absl::StatusOr<ObjectPtr> Put(const std::string& key, nlohmann::json object,
                                const std::string& expect_rv);
  // Removes the object (if its version matches `expect_rv`, "" = any); returns its last state.
  absl::StatusOr<ObjectPtr> Remove(const std::string& key, const std::string& expect_rv = "");

  // Events after `from_rv` for keys under `prefix`, then live ones. kOutOfRange (Gone) when
  // `from_rv` is older than the kept history. Without `from_rv`: an ADDED event for every
  // current object first (taken atomically with the subscription), then live ones.
  absl::StatusOr<std::shared_ptr<Subscription>> Watch(const std::string& prefix,
                                                      std::optional<int64_t> from_rv);

 private:
  ObjectStore() = default;
  absl::Status Append(const nlohmann::json& record);
  void Publish(StoreEvent e);
  absl::Status Replay(const std::string& path);
  absl::Status Compact();
  // Every change to objects_ goes through these two, which keep owners_ in step.
  void SetObject(const std::string& key, ObjectPtr object);
  void EraseObject(const std::string& key);

  mutable std::mutex mu_;
  std::map<std::string, ObjectPtr> objects_;
  std::unordered_map<std::string, std::set<std::string>> owners_;  // owner uid -> keys
  int64_t rv_ = 1;
  std::deque<StoreEvent> history_;
  size_t history_limit_ = 10000;
  size_t watch_queue_limit_ = 100000;
  int64_t oldest_ = 1;  // watches from versions below this are Gone
  std::vector<std::weak_ptr<Subscription>> subscriptions_;
  std::string dir_;
  int log_fd_ = -1;
};

}  // namespace lockstep::local
