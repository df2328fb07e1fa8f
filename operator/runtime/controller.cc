#include "operator/runtime/controller.h"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <exception>

#include "common/log.h"
#include "operator/kube/api_error.h"

namespace lockstep::runtime {

Controller::Controller(std::string name, WorkQueue* queue, Reconciler reconcile, int workers)
    : name_(std::move(name)),
      queue_(queue),
      reconcile_(std::move(reconcile)),
      workers_(std::max(1, workers)) {}

void Controller::ProcessOne(const std::string& key) {
  absl::StatusOr<ReconcileResult> result;
  try {
    result = reconcile_(key);
  } catch (const std::exception& e) {
    result = absl::InternalError(StrCat("reconcile threw: ", e.what()));
  } catch (...) {
    result = absl::InternalError("reconcile threw a non-standard exception");
  }
  if (result.ok()) {
    queue_->Forget(key);
    if (result->requeue_after) {
      queue_->AddAfter(key, *result->requeue_after);
    } else if (result->requeue) {
      queue_->AddRateLimited(key);
    }
    return;
  }
  const absl::Status& error = result.status();
  switch (error.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnimplemented:
      common::LogError(name_, key, ": ", error.message(), " (not retried)");
      queue_->Forget(key);
      return;
    default:
      break;
  }
  if (std::optional<absl::Duration> after = kube::RetryAfter(error)) {
    common::LogWarning(name_, key, ": ", error.message(), " (retry in ",
                       absl::FormatDuration(*after), ")");
    queue_->AddAfter(key, *after);
    return;
  }
  common::LogWarning(name_, key, ": ", error.message(), " (retry ", queue_->NumRequeues(key) + 1,
                     ")");
  queue_->AddRateLimited(key);
}

void Controller::Run(std::stop_token stop) {
  boost::asio::thread_pool pool(static_cast<size_t>(workers_));
  for (int i = 0; i < workers_; ++i) {
    boost::asio::post(pool, [this] {
      while (std::optional<std::string> key = queue_->Get()) {
        ProcessOne(*key);
        queue_->Done(*key);
      }
    });
  }
  common::LogInfo(name_, "started ", workers_, " workers");
  {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    cv.wait(lock, stop, [] { return false; });
  }
  queue_->ShutDownNow();
  pool.join();
  common::LogInfo(name_, "stopped");
}

}  // namespace lockstep::runtime
