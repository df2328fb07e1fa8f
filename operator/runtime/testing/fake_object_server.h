#pragma once
// FakeObjectServer (test-only, target lockstep_runtime_testing): an in-memory Lease and Event
// store behind FakeTransport, for leader-election and event tests:
// GET/POST/PUT/PATCH with resourceVersion checks (409 Conflict on a stale PUT).
// Thread-safety: thread-safe (the transport may call it from any thread).

#include <functional>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "operator/kube/testing/fake_transport.h"

namespace lockstep::runtime::testing {

class FakeObjectServer {
 public:
  explicit FakeObjectServer(kube::FakeTransport* transport);

  void set_down(bool down);
  void Clear();  // forget every object
  // Runs once, before the next PUT is handled (to interleave a competing writer).
  void BeforeNextPut(std::function<void()> f);
  std::optional<nlohmann::json> Get(const std::string& target) const;
  // The objects under a collection's path ("/api/v1/namespaces/ml/events").
  std::vector<nlohmann::json> List(const std::string& collection) const;
  size_t size() const;
  std::vector<std::string> log() const;  // "POST /path", "PATCH /path", ...

 private:
  std::optional<kube::HttpResponse> Handle(const kube::HttpRequest& r);

  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> objects_;  // by path
  std::vector<std::string> log_;
  int64_t rv_ = 0;
  bool down_ = false;
  std::function<void()> before_put_;
};

}  // namespace lockstep::runtime::testing
