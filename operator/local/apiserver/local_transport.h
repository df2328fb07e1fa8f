#pragma once
// LocalTransport: a kube::Transport that hands requests straight to an in-process ApiServer,
// so components running inside `lockstep local` (the runner, the controller) use the same
// REST client, informers and watch semantics as they would against a remote server.
// Thread-safety: thread-safe.

#include <memory>

#include "operator/kube/transport.h"
#include "operator/local/apiserver/api_server.h"

namespace lockstep::local {

class LocalTransport final : public kube::Transport {
 public:
  explicit LocalTransport(ApiServer* api) : api_(api) {}
  absl::StatusOr<kube::HttpResponse> Send(const kube::HttpRequest& request) override;
  absl::StatusOr<kube::StreamedResponse> Open(const kube::HttpRequest& request) override;

 private:
  ApiServer* api_;
};

// The body Open streams a watch through: each Read is the source's next lines, and Cancel
// ends the source (WatchSource::Cancel), so a Read blocked in it returns kCancelled at once.
std::unique_ptr<kube::BodyStream> NewWatchBody(std::shared_ptr<WatchSource> source);

}  // namespace lockstep::local
