#include "operator/kube/connect.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "operator/kube/cpprest_transport.h"

namespace lockstep::kube {

BearerTokenTransport::BearerTokenTransport(std::shared_ptr<Transport> inner, std::string token,
                                           std::string token_file, common::Clock* clock)
    : inner_(std::move(inner)),
      token_file_(std::move(token_file)),
      clock_(clock),
      token_(std::move(token)) {}

HttpRequest BearerTokenTransport::Authorize(const HttpRequest& request) {
  HttpRequest out = request;
  std::string token;
  {
    std::lock_guard lock(mu_);
    absl::Time now = clock_->Monotonic();
    if (!token_file_.empty() && now >= next_read_) {
      std::ifstream in(token_file_);
      std::ostringstream text;
      text << in.rdbuf();
      std::string fresh(absl::StripAsciiWhitespace(text.str()));
      if (in && !fresh.empty()) token_ = std::move(fresh);
      next_read_ = now + kRefresh;
    }
    token = token_;
  }
  if (!token.empty()) out.SetHeader("Authorization", "Bearer " + token);
  return out;
}

absl::StatusOr<HttpResponse> BearerTokenTransport::Send(const HttpRequest& request) {
  return inner_->Send(Authorize(request));
}

absl::StatusOr<StreamedResponse> BearerTokenTransport::Open(const HttpRequest& request) {
  return inner_->Open(Authorize(request));
}

absl::StatusOr<std::shared_ptr<Transport>> Connect(const RestConfig& config, common::Clock* clock) {
  absl::StatusOr<std::unique_ptr<Transport>> http = NewHttpTransport({
      .server = config.server,
      .ca_pem = config.ca_pem,
      .client_cert_pem = config.client_cert_pem,
      .client_key_pem = config.client_key_pem,
      .insecure_skip_tls_verify = config.insecure_skip_tls_verify,
  });
  if (!http.ok()) return http.status();
  std::shared_ptr<Transport> transport = std::move(*http);
  if (config.bearer_token.empty() && config.bearer_token_file.empty()) return transport;
  return std::shared_ptr<Transport>(std::make_shared<BearerTokenTransport>(
      std::move(transport), config.bearer_token, config.bearer_token_file, clock));
}

}  // namespace lockstep::kube
