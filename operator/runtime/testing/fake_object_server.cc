#include "operator/runtime/testing/fake_object_server.h"

namespace lockstep::runtime::testing {
namespace {

kube::HttpResponse Status(int code, const char* reason) {
  return {code, {}, nlohmann::json{{"kind", "Status"}, {"code", code}, {"reason", reason}}.dump()};
}

}  // namespace

FakeObjectServer::FakeObjectServer(kube::FakeTransport* transport) {
  transport->SetHandler([this](const kube::HttpRequest& r) { return Handle(r); });
}

void FakeObjectServer::set_down(bool down) {
  std::lock_guard lock(mu_);
  down_ = down;
}

void FakeObjectServer::Clear() {
  std::lock_guard lock(mu_);
  objects_.clear();
}

void FakeObjectServer::BeforeNextPut(std::function<void()> f) {
  std::lock_guard lock(mu_);
  before_put_ = std::move(f);
}

std::optional<nlohmann::json> FakeObjectServer::Get(const std::string& target) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(target);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<nlohmann::json> FakeObjectServer::List(const std::string& collection) const {
  std::lock_guard lock(mu_);
  std::vector<nlohmann::json> out;
  for (const auto& [path, object] : objects_) {
    if (path.starts_with(collection + "/")) out.push_back(object);
  }
  return out;
}

size_t FakeObjectServer::size() const {
  std::lock_guard lock(mu_);
  return objects_.size();
}

std::vector<std::string> FakeObjectServer::log() const {
  std::lock_guard lock(mu_);
  return log_;
}

std::optional<kube::HttpResponse> FakeObjectServer::Handle(const kube::HttpRequest& r) {
  std::function<void()> hook;
  if (r.method == "PUT") {
    std::lock_guard lock(mu_);
    hook = std::move(before_put_);
    before_put_ = nullptr;
  }
  if (hook) hook();
  std::lock_guard lock(mu_);
  if (down_) return Status(503, "ServiceUnavailable");
  log_.push_back(r.method + " " + r.target);
  nlohmann::json body = nlohmann::json::parse(r.body.empty() ? "{}" : r.body);
  if (r.method == "GET") {
    auto it = objects_.find(r.target);
    if (it == objects_.end()) return Status(404, "NotFound");
    return kube::HttpResponse{200, {}, it->second.dump()};
  }
  if (r.method == "POST") {
    std::string path = r.target + "/" + body["metadata"]["name"].get<std::string>();
    if (objects_.contains(path)) return Status(409, "AlreadyExists");
    body["metadata"]["resourceVersion"] = std::to_string(++rv_);
    objects_[path] = body;
    return kube::HttpResponse{201, {}, body.dump()};
  }
  auto it = objects_.find(r.target);
  if (it == objects_.end()) return Status(404, "NotFound");
  if (r.method == "PUT") {
    if (body["metadata"].value("resourceVersion", "") !=
        it->second["metadata"]["resourceVersion"].get<std::string>()) {
      return Status(409, "Conflict");
    }
    body["metadata"]["resourceVersion"] = std::to_string(++rv_);
    it->second = body;
    return kube::HttpResponse{200, {}, body.dump()};
  }
  if (r.method == "PATCH") {
    it->second.merge_patch(body);
    it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
    return kube::HttpResponse{200, {}, it->second.dump()};
  }
  return Status(405, "MethodNotAllowed");
}

}  // namespace lockstep::runtime::testing
