#pragma once
// The API conformance suite's fixture: the local API server driven in-process and over raw
// HTTP (every test runs both ways), with helpers that speak to it as clients do.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/api/manifest.h"
#include "operator/kube/cpprest_transport.h"
#include "operator/kube/rest_client.h"
#include "operator/local/apiserver/api_server.h"
#include "operator/local/apiserver/http_server.h"

namespace lockstep::local::conformance {

using nlohmann::json;

struct Answer {
  int status;
  json body;
};

inline constexpr char kPodsPath[] = "/api/v1/namespaces/default/pods";

class ApiServerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Reset({}); }
  void Reset(ApiServerOptions options) {
    http_.reset();
    transport_.reset();
    server_ = ApiServer::Create(std::move(options)).value();
    if (GetParam()) {
      http_ = HttpServer::Start(server_.get()).value();
      transport_ = kube::NewHttpTransport({.server = http_->url()}).value();
    }
  }

  // Over HTTP: the raw request, as a client would send it.
  Answer CallHttp(const std::string& method, const std::string& target, const json& body,
                  const std::string& content_type) {
    kube::HttpRequest r{.method = method, .target = target};
    if (!body.is_null()) r.body = body.is_string() ? body.get<std::string>() : body.dump();
    r.SetHeader("Content-Type", content_type);
    absl::StatusOr<kube::HttpResponse> out = transport_->Send(r);
    if (!out.ok()) return {0, json(std::string(out.status().message()))};
    json parsed = json::parse(out->body, nullptr, false);
    return {out->status, parsed.is_discarded() ? json(out->body) : parsed};
  }

  Answer Call(const std::string& method, const std::string& target, const json& body = nullptr,
              const std::string& content_type = "application/json") {
    if (GetParam()) return CallHttp(method, target, body, content_type);
    ApiRequest r = ParseTarget(method, target);
    r.content_type = content_type;
    if (!body.is_null()) r.body = body.is_string() ? body.get<std::string>() : body.dump();
    ApiResponse out = server_->Handle(r);
    if (out.watch) return {out.status, json(nullptr)};
    json parsed = json::parse(out.body, nullptr, false);
    return {out.status, parsed.is_discarded() ? json(out.body) : parsed};
  }

  // Lines a watch produces until `n` events (bookmarks included) have arrived.
  std::vector<json> WatchEvents(const std::string& target, size_t n) {
    if (GetParam()) {
      std::vector<json> events;
      std::string t = target + (target.find('?') == std::string::npos ? "?" : "&") + "watch=true";
      absl::StatusOr<kube::StreamedResponse> out = transport_->Open({.method = "GET", .target = t});
      if (!out.ok()) return events;
      kube::WatchStream stream(std::move(out->body), t);
      while (events.size() < n) {
        auto e = stream.Next();
        if (!e.ok() || !e->has_value()) break;
        events.push_back(
            {{"type", kube::WatchEventTypeName((**e).type)}, {"object", (**e).object}});
      }
      return events;
    }
    ApiRequest r = ParseTarget("GET", target);
    r.query["watch"] = "true";
    ApiResponse out = server_->Handle(r);
    std::vector<json> events;
    if (!out.watch) return events;
    while (events.size() < n) {
      std::optional<std::string> lines = out.watch->Next();
      if (!lines) break;
      size_t pos = 0;
      while (pos < lines->size()) {
        size_t nl = lines->find('\n', pos);
        events.push_back(json::parse(lines->substr(pos, nl - pos)));
        pos = nl + 1;
      }
    }
    return events;
  }

  // Whether GET `target` (a collection with at least one object) answers with a watch stream,
  // whose first event is read, rather than with a list.
  bool AnswersWithAWatch(const std::string& target) {
    if (GetParam()) {
      absl::StatusOr<kube::StreamedResponse> out =
          transport_->Open({.method = "GET", .target = target});
      if (!out.ok() || out->status != 200) return false;
      kube::WatchStream stream(std::move(out->body), target);
      auto e = stream.Next();
      return e.ok() && e->has_value() && (**e).type == kube::WatchEvent::Type::kAdded;
    }
    return server_->Handle(ParseTarget("GET", target)).watch != nullptr;
  }

  // Puts a pod on a node as a scheduler does, through its binding subresource.
  Answer Bind(const std::string& pod, const std::string& node = "local") {
    return Call("POST", std::string(kPodsPath) + "/" + pod + "/binding",
                {{"apiVersion", "v1"},
                 {"kind", "Binding"},
                 {"metadata", {{"name", pod}}},
                 {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}});
  }

  json Pod(const std::string& name, json labels = json::object()) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"labels", labels}}},
            {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
  }

  void InstallCrd() {
    auto docs = api::ReadManifestFile(std::string(LOCKSTEP_SOURCE_DIR) +
                                      "/crds/lockstep.io_trainingjobs.yaml");
    ASSERT_TRUE(docs.ok()) << docs.status();
    Answer a = Call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", (*docs)[0]);
    ASSERT_EQ(a.status, 201) << a.body.dump();
  }

  json Job(const std::string& name, int workers = 2) {
    return {{"apiVersion", "lockstep.io/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"replicaSpecs",
               {{"Worker",
                 {{"replicas", workers},
                  {"template",
                   {{"spec",
                     {{"containers",
                       {{{"name", "lockstep"}, {"image", "lockstep/trainer:0.1.0"}}}}}}}}}}}}}}};
  }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<kube::Transport> transport_;
};

inline constexpr const char* kPods = kPodsPath;
inline constexpr char kJobs[] = "/apis/lockstep.io/v1alpha1/namespaces/default/trainingjobs";

inline std::string ParamName(const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "Http" : "InProcess";
}

}  // namespace lockstep::local::conformance
