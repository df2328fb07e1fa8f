#pragma once
// WorkQueue: the controller's queue of object keys ("namespace/name"), as client-go's
// rate-limited work queue. Guarantees:
//  - a key is queued at most once, however often it is added (dedupe);
//  - a key is never handed to two workers at once: a key added while it is being processed is
//    queued again when Done() is called for it;
//  - AddAfter() queues a key when the delay has passed (on the injected Clock); of several
//    pending delays for one key, the earliest wins;
//  - AddRateLimited() delays a key by its own exponential backoff (base * 2^failures, capped),
//    which Forget() resets after a success;
//  - after ShutDown(), adds are ignored and Get() returns what is queued, then nullopt; after
//    ShutDownNow(), Get() returns nullopt at once and what was queued is dropped (a stopping
//    controller takes no new work: the next leader lists every object anyway).
// Thread-safety: thread-safe.

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"

namespace lockstep::runtime {

struct WorkQueueOptions {
  absl::Duration base_delay = absl::Milliseconds(5);
  absl::Duration max_delay = absl::Seconds(1000);
};

class WorkQueue {
 public:
  // `clock` must outlive the queue.
  explicit WorkQueue(common::Clock* clock, WorkQueueOptions options = {});
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

  // Blocks until a key is ready; nullopt once shut down and empty.
  std::optional<std::string> Get();
  void Done(const std::string& key);

  void ShutDown();
  void ShutDownNow();
  bool shutting_down() const;
  size_t Len() const;      // keys ready now
  size_t Waiting() const;  // keys with a pending delay

 private:
  void Close(bool drop_queued);  // ShutDown, dropping what is queued or not

  struct State;
  std::shared_ptr<State> state_;  // shared with pending timers, which may outlive a call
  common::Clock* clock_;
  WorkQueueOptions options_;
};

}  // namespace lockstep::runtime
