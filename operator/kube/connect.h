#pragma once
// Connect: a RestConfig becomes a Transport (cpprestsdk with the config's TLS settings),
// wrapped so that every request carries the bearer token. A token file is re-read once a
// minute, because in-cluster service-account tokens rotate; a read failure keeps the last
// good token. Tokens never appear in messages.
// Thread-safety: thread-safe.

#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "operator/kube/kube_config.h"
#include "operator/kube/transport.h"

namespace lockstep::kube {

class BearerTokenTransport final : public Transport {
 public:
  static constexpr absl::Duration kRefresh = absl::Minutes(1);

  // Either a fixed `token` or a `token_file`. `clock` must outlive this.
  BearerTokenTransport(std::shared_ptr<Transport> inner, std::string token, std::string token_file,
                       common::Clock* clock);

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override;
  absl::StatusOr<StreamedResponse> Open(const HttpRequest& request) override;

 private:
  HttpRequest Authorize(const HttpRequest& request);

  std::shared_ptr<Transport> inner_;
  std::string token_file_;
  common::Clock* clock_;
  std::mutex mu_;
  std::string token_;
  absl::Time next_read_ = absl::InfinitePast();
};

absl::StatusOr<std::shared_ptr<Transport>> Connect(const RestConfig& config, common::Clock* clock);

}  // namespace lockstep::kube
