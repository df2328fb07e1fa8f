#include "operator/trainingjob/progress.h"

#include <nlohmann/json.hpp>

#include "common/str_util.h"
#include "operator/api/trainingjob_json.h"
#include "operator/kube/cpprest_transport.h"

namespace lockstep::trainingjob {

absl::StatusOr<api::Progress> ParseProgress(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return absl::InvalidArgumentError("progress is not a JSON object");
  // Fields the operator owns are not the trainer's to set.
  j.erase("summary");
  j.erase("updateTime");
  api::FieldErrors errors;
  api::Progress p =
      api::DecodeProgress(j, api::FieldPath("progress"), &errors, {.reject_unknown_fields = false});
  if (!errors.empty()) return absl::InvalidArgumentError(errors.front().ToString());
  return p;
}

namespace {

class HttpProgressSource final : public ProgressSource {
 public:
  explicit HttpProgressSource(absl::Duration timeout) : timeout_(timeout) {}

  absl::StatusOr<api::Progress> Fetch(const std::string& pod_ip, int32_t port) override {
    std::string host = pod_ip.find(':') != std::string::npos ? StrCat("[", pod_ip, "]") : pod_ip;
    absl::StatusOr<std::unique_ptr<kube::Transport>> t = kube::NewHttpTransport(
        {.server = StrCat("http://", host, ":", port), .connect_timeout = timeout_});
    if (!t.ok()) return t.status();
    kube::HttpRequest req{.method = "GET", .target = "/progress", .timeout = timeout_};
    req.SetHeader("Accept", "application/json");
    absl::StatusOr<kube::HttpResponse> res = (*t)->Send(req);
    if (!res.ok()) return res.status();
    if (res->status != 200) {
      return absl::UnavailableError(StrCat("GET /progress answered ", res->status));
    }
    return ParseProgress(res->body);
  }

 private:
  absl::Duration timeout_;
};

}  // namespace

std::unique_ptr<ProgressSource> NewHttpProgressSource(absl::Duration timeout) {
  return std::make_unique<HttpProgressSource>(timeout);
}

}  // namespace lockstep::trainingjob
