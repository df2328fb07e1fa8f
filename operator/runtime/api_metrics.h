#pragma once
// InstrumentedTransport: a Transport decorator that records every API request's latency in
// lockstep_api_request_duration_seconds{verb,code} ("error" when no response came back). For
// a streamed request (watch) the time is until the headers arrived.
// Thread-safety: as the wrapped transport.

#include <memory>

#include "common/metrics.h"
#include "operator/kube/transport.h"

namespace lockstep::runtime {

inline constexpr char kApiLatencyMetric[] = "lockstep_api_request_duration_seconds";

class InstrumentedTransport final : public kube::Transport {
 public:
  // Declares the histogram in `metrics`, which must outlive the transport.
  InstrumentedTransport(std::shared_ptr<kube::Transport> inner, common::MetricsRegistry* metrics);
  absl::StatusOr<kube::HttpResponse> Send(const kube::HttpRequest& request) override;
  absl::StatusOr<kube::StreamedResponse> Open(const kube::HttpRequest& request) override;

 private:
  void Record(const std::string& verb, int code, double seconds);
  std::shared_ptr<kube::Transport> inner_;
  common::MetricsRegistry* metrics_;
};

}  // namespace lockstep::runtime
