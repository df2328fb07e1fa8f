#pragma once
// List+watch, as an explicit state machine (WatcherMachine, pure, no I/O) and the loop that
// runs it (Watcher). The machine:
//
//   state          input                               next           action
//   kListing       list succeeded (rv)                 kWatching      watch from rv
//   kListing       list failed                         kListBackoff   wait (backoff)
//   kListBackoff   wait over                           kListing       list
//   kWatching      ADDED / MODIFIED / DELETED          kWatching      deliver; rv = object's rv
//   kWatching      BOOKMARK                            kWatching      rv = bookmark's rv
//   kWatching      stream ended, or rotation due       kWatching      watch again from rv
//   kWatching      410 Gone (response or ERROR event)  kListing       list (replace the cache)
//   kWatching      other error, connection dropped     kWatchBackoff  wait (backoff)
//   kWatchBackoff  wait over                           kWatching      watch from rv
//
// Resuming from the last delivered resourceVersion is what makes a dropped connection lose no
// event; 410 means that version left the server's window, so only a fresh list is correct.
// The backoff resets after a successful list and after a watch that delivered something.
// Thread-safety: WatcherMachine is a plain value; Watcher::Run runs on the caller's thread.

#include <cstdint>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "common/clock.h"
#include "operator/kube/rest_client.h"
#include "operator/runtime/backoff.h"

namespace lockstep::runtime {

struct WatcherAction {
  enum class Kind { kList, kWatch, kWait, kDeliver, kIgnore };
  Kind kind = Kind::kList;
  std::string resource_version;  // kWatch: from where
  absl::Duration wait;           // kWait: how long, then OnWaitOver()
};

class WatcherMachine {
 public:
  enum class State { kListing, kListBackoff, kWatching, kWatchBackoff };

  explicit WatcherMachine(BackoffPolicy backoff = {}, uint64_t seed = 1);

  WatcherAction Start();
  WatcherAction OnListed(const std::string& resource_version);
  WatcherAction OnListFailed(const absl::Status& error);
  // An event read from the watch: kDeliver (pass it on), kIgnore (bookmark), or what to do
  // instead of reading on (an ERROR event ends the watch).
  WatcherAction OnEvent(const kube::WatchEvent& event);
  // The watch could not be opened, or its stream broke.
  WatcherAction OnWatchFailed(const absl::Status& error);
  // The server ended the stream cleanly, or the client rotated it.
  WatcherAction OnWatchEnded();
  WatcherAction OnWaitOver();

  State state() const { return state_; }
  const std::string& resource_version() const { return resource_version_; }
  static const char* StateName(State s);

 private:
  WatcherAction Wait();

  State state_ = State::kListing;
  std::string resource_version_;
  Backoff backoff_;
  bool delivered_ = false;  // since the current watch opened
};

// What a watcher feeds: a whole list (replace everything), then one event at a time.
class WatchSink {
 public:
  virtual ~WatchSink() = default;
  virtual void Replace(std::vector<nlohmann::json> items, const std::string& resource_version) = 0;
  virtual void Apply(kube::WatchEvent event) = 0;
};

struct WatcherOptions {
  std::string namespace_;  // empty: all namespaces
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;
  // Each watch asks the server to end it after a random time in [rotation, 2*rotation); the
  // client cancels it itself 30 s after that, should the server not.
  absl::Duration rotation = absl::Minutes(5);
  BackoffPolicy backoff;
  uint64_t seed = 1;
};

class Watcher {
 public:
  // Pointers must outlive the watcher.
  Watcher(kube::RestClient* client, kube::Resource resource, WatcherOptions options,
          common::Clock* clock, WatchSink* sink);

  // Lists and watches until `stop` is requested. Never throws; errors are retried.
  void Run(std::stop_token stop);

 private:
  WatcherAction Watch(const std::string& resource_version, std::stop_token stop);

  kube::RestClient* client_;
  kube::Resource resource_;
  WatcherOptions options_;
  common::Clock* clock_;
  WatchSink* sink_;
  WatcherMachine machine_;
  std::mt19937_64 rng_;
};

}  // namespace lockstep::runtime
