#pragma once
// Controller: N workers that take keys from a WorkQueue and reconcile them, on a Boost.Asio
// thread pool. Level-triggered: the reconciler gets only the key and reads the caches.
//
// What a reconcile's outcome does to its key:
//   OK, no requeue              Forget (reset backoff)
//   OK, requeue_after = d       Forget, then AddAfter(d)
//   OK, requeue = true          AddRateLimited
//   error 429 with Retry-After  AddAfter(retry after)
//   kInvalidArgument,           logged, Forget: retrying cannot help; the reconciler reports
//   kPermissionDenied,          such errors on the object itself
//   kUnimplemented
//   any other error             AddRateLimited (exponential per-key backoff)
//   an exception                treated as kInternal: logged and retried with backoff
// Thread-safety: Run() blocks its caller; the reconciler runs on up to N threads at once, but
// never on the same key twice at once (the queue guarantees it).

#include <functional>
#include <optional>
#include <stop_token>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/runtime/work_queue.h"

namespace lockstep::runtime {

struct ReconcileResult {
  bool requeue = false;
  std::optional<absl::Duration> requeue_after;
};

using Reconciler = std::function<absl::StatusOr<ReconcileResult>(const std::string& key)>;

class Controller {
 public:
  // `queue` must outlive the controller.
  Controller(std::string name, WorkQueue* queue, Reconciler reconcile, int workers = 2);

  // Runs the workers until `stop`, then stops taking keys (what is queued is dropped) and
  // waits for the reconciles in flight.
  void Run(std::stop_token stop);
  // One key, synchronously: what a worker does (exposed for tests).
  void ProcessOne(const std::string& key);

 private:
  std::string name_;
  WorkQueue* queue_;
  Reconciler reconcile_;
  int workers_;
};

}  // namespace lockstep::runtime
