#include "operator/runtime/api_metrics.h"

#include <chrono>

namespace lockstep::runtime {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

InstrumentedTransport::InstrumentedTransport(std::shared_ptr<kube::Transport> inner,
                                             common::MetricsRegistry* metrics)
    : inner_(std::move(inner)), metrics_(metrics) {
  metrics_->AddHistogram(kApiLatencyMetric, "Latency of Kubernetes API requests, by verb and code.",
                         common::LatencyBuckets());
}

void InstrumentedTransport::Record(const std::string& verb, int code, double seconds) {
  metrics_->Observe(kApiLatencyMetric,
                    {{"code", code == 0 ? "error" : std::to_string(code)}, {"verb", verb}},
                    seconds);
}

absl::StatusOr<kube::HttpResponse> InstrumentedTransport::Send(const kube::HttpRequest& request) {
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<kube::HttpResponse> r = inner_->Send(request);
  Record(request.method, r.ok() ? r->status : 0, Since(t0));
  return r;
}

absl::StatusOr<kube::StreamedResponse> InstrumentedTransport::Open(
    const kube::HttpRequest& request) {
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<kube::StreamedResponse> r = inner_->Open(request);
  Record("WATCH", r.ok() ? r->status : 0, Since(t0));
  return r;
}

}  // namespace lockstep::runtime
