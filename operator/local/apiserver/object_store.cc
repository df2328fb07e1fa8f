#include "operator/local/apiserver/object_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/str_util.h"

namespace lockstep::local {

namespace {

constexpr char kLogName[] = "objects.log";

std::string ErrnoText() { return std::strerror(errno); }

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string RvOf(const nlohmann::json& object) {
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto rv = meta->find("resourceVersion");
  return rv != meta->end() && rv->is_string() ? rv->get<std::string>() : "";
}

}  // namespace

std::string StoreKey(const std::string& group_resource, const std::string& ns,
                     const std::string& name) {
  return group_resource + "/" + ns + "/" + name;
}

std::string StorePrefix(const std::string& group_resource, const std::string& ns) {
  return ns.empty() ? group_resource + "/" : group_resource + "/" + ns + "/";
}

std::vector<StoreEvent> Subscription::Next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty() || closed_; });
  std::vector<StoreEvent> out(std::make_move_iterator(events_.begin()),
                              std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool Subscription::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

void Subscription::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

void Subscription::Push(const StoreEvent& e) {
  std::lock_guard lock(mu_);
  if (closed_) return;
  if (events_.size() >= max_queued_) {
    closed_ = true;  // too slow: the client will see the stream end and relist
    events_.clear();
  } else {
    events_.push_back(e);
  }
  cv_.notify_all();
}

absl::StatusOr<std::unique_ptr<ObjectStore>> ObjectStore::Open(const std::string& state_dir,
                                                               size_t history, size_t watch_queue) {
  std::unique_ptr<ObjectStore> store(new ObjectStore());
  store->history_limit_ = std::max<size_t>(1, history);
  store->watch_queue_limit_ = std::max<size_t>(1, watch_queue);
  if (state_dir.empty()) return store;
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    return absl::UnavailableError(StrCat("state directory ", state_dir, ": ", ec.message()));
  }
  store->dir_ = state_dir;
  std::string log = state_dir + "/" + kLogName;
  if (std::filesystem::exists(log)) {
    if (absl::Status s = store->Replay(log); !s.ok()) return s;
  }
  if (absl::Status s = store->Compact(); !s.ok()) return s;
  store->oldest_ = store->rv_;
  return store;
}

ObjectStore::~ObjectStore() {
  std::lock_guard lock(mu_);
  for (auto& weak : subscriptions_) {
    if (auto s = weak.lock()) s->Close();
  }
  if (log_fd_ >= 0) ::close(log_fd_);
}

absl::Status ObjectStore::Replay(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A line cut short by a crash ends the log; Compact() rewrites it without the tail.
    if (!r.is_object() || !r.contains("rv") || !r["rv"].is_number_integer()) break;
    rv_ = std::max(rv_, r["rv"].get<int64_t>());
    const std::string op = r.value("op", "");
    if (op == "put" && r.contains("key") && r["key"].is_string() && r.contains("object")) {
      SetObject(r["key"].get<std::string>(),
                std::make_shared<const nlohmann::json>(std::move(r["object"])));
    } else if (op == "del" && r.contains("key") && r["key"].is_string()) {
      EraseObject(r["key"].get<std::string>());
    }
  }
  return absl::OkStatus();
}

namespace {

std::vector<std::string> OwnerUids(const nlohmann::json& object) {
  std::vector<std::string> out;
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return out;
  auto refs = meta->find("ownerReferences");
  if (refs == meta->end() || !refs->is_array()) return out;
  for (const nlohmann::json& r : *refs) {
    if (r.is_object() && r.contains("uid") && r["uid"].is_string()) out.push_back(r["uid"]);
  }
  return out;
}

}  // namespace

void ObjectStore::SetObject(const std::string& key, ObjectPtr object) {
  EraseObject(key);
  for (const std::string& uid : OwnerUids(*object)) owners_[uid].insert(key);
  objects_[key] = std::move(object);
}

void ObjectStore::EraseObject(const std::string& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  for (const std::string& uid : OwnerUids(*it->second)) {
    auto o = owners_.find(uid);
    if (o == owners_.end()) continue;
    o->second.erase(key);
    if (o->second.empty()) owners_.erase(o);
  }
  objects_.erase(it);
}

std::vector<std::pair<std::string, ObjectPtr>> ObjectStore::Dependents(
    const std::string& owner_uid) const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, ObjectPtr>> out;
  auto o = owners_.find(owner_uid);
  if (o == owners_.end()) return out;
  for (const std::string& key : o->second) out.emplace_back(key, objects_.at(key));
  return out;
}

absl::Status ObjectStore::Compact() {
  std::string log = dir_ + "/" + kLogName;
  std::string tmp = log + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(StrCat("cannot write ", tmp, ": ", ErrnoText()));
  std::string data = nlohmann::json{{"rv", rv_}, {"op", "mark"}}.dump() + "\n";
  for (const auto& [key, object] : objects_) {
    data += nlohmann::json{{"rv", rv_}, {"op", "put"}, {"key", key}, {"object", *object}}.dump(
                -1, ' ', false, nlohmann::json::error_handler_t::replace) +
            "\n";
  }
  bool ok = WriteAll(fd, data) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), log.c_str()) != 0) {
    return absl::UnavailableError(StrCat("cannot write ", log, ": ", ErrnoText()));
  }
  if (int dir = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  log_fd_ = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log_fd_ < 0) return absl::UnavailableError(StrCat("cannot open ", log, ": ", ErrnoText()));
  return absl::OkStatus();
}

absl::Status ObjectStore::Append(const nlohmann::json& record) {
  if (log_fd_ < 0) return absl::OkStatus();
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (!WriteAll(log_fd_, line) || ::fdatasync(log_fd_) != 0) {
    return absl::UnavailableError(
        StrCat("state directory ", dir_, ": write failed: ", ErrnoText()));
  }
  return absl::OkStatus();
}

ObjectPtr ObjectStore::Get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second;
}

std::pair<std::vector<std::pair<std::string, ObjectPtr>>, int64_t> ObjectStore::List(
    const std::string& prefix) const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, ObjectPtr>> out;
  for (auto it = objects_.lower_bound(prefix);
       it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    out.emplace_back(it->first, it->second);
  }
  return {std::move(out), rv_};
}

bool ObjectStore::Any(const std::string& prefix) const {
  std::lock_guard lock(mu_);
  auto it = objects_.lower_bound(prefix);
  return it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

int64_t ObjectStore::resource_version() const {
  std::lock_guard lock(mu_);
  return rv_;
}

absl::StatusOr<ObjectPtr> ObjectStore::Put(const std::string& key, nlohmann::json object,
                                           const std::string& expect_rv) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  bool exists = it != objects_.end();
  if (expect_rv == "-" && exists) return absl::AlreadyExistsError(key);
  if (!expect_rv.empty() && expect_rv != "-") {
    if (!exists) return absl::NotFoundError(key);
    if (RvOf(*it->second) != expect_rv) return absl::AbortedError(key);
  }
  int64_t rv = rv_ + 1;
  object["metadata"]["resourceVersion"] = std::to_string(rv);
  if (absl::Status s = Append({{"rv", rv}, {"op", "put"}, {"key", key}, {"object", object}});
      !s.ok()) {
    return s;
  }
  rv_ = rv;
  auto stored = std::make_shared<const nlohmann::json>(std::move(object));
  ObjectPtr old = exists ? it->second : nullptr;
  SetObject(key, stored);
  Publish({exists ? StoreEvent::Type::kModified : StoreEvent::Type::kAdded, rv, key, stored, old});
  return stored;
}

absl::StatusOr<ObjectPtr> ObjectStore::Remove(const std::string& key,
                                              const std::string& expect_rv) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return absl::NotFoundError(key);
  if (!expect_rv.empty() && RvOf(*it->second) != expect_rv) return absl::AbortedError(key);
  int64_t rv = rv_ + 1;
  if (absl::Status s = Append({{"rv", rv}, {"op", "del"}, {"key", key}}); !s.ok()) return s;
  rv_ = rv;
  // The deleted object carries the deletion's resourceVersion, as Kubernetes does.
  nlohmann::json last = *it->second;
  last["metadata"]["resourceVersion"] = std::to_string(rv);
  auto gone = std::make_shared<const nlohmann::json>(std::move(last));
  ObjectPtr old = it->second;
  EraseObject(key);
  Publish({StoreEvent::Type::kDeleted, rv, key, gone, old});
  return gone;
}

void ObjectStore::Publish(StoreEvent e) {
  history_.push_back(e);
  while (history_.size() > history_limit_) {
    oldest_ = history_.front().resource_version;
    history_.pop_front();
  }
  size_t live = 0;
  for (auto& weak : subscriptions_) {
    std::shared_ptr<Subscription> s = weak.lock();
    if (!s || s->closed()) continue;
    subscriptions_[live++] = weak;
    if (e.key.compare(0, s->prefix_.size(), s->prefix_) == 0) s->Push(e);
  }
  subscriptions_.resize(live);
}

absl::StatusOr<std::shared_ptr<Subscription>> ObjectStore::Watch(const std::string& prefix,
                                                                 std::optional<int64_t> from) {
  std::lock_guard lock(mu_);
  if (from && *from < oldest_) {
    return absl::OutOfRangeError(StrCat("too old resource version: ", *from, " (", oldest_, ")"));
  }
  auto s = std::make_shared<Subscription>();
  s->prefix_ = prefix;
  s->max_queued_ = watch_queue_limit_;
  if (!from) {
    for (auto it = objects_.lower_bound(prefix);
         it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      s->Push({StoreEvent::Type::kAdded, rv_, it->first, it->second, nullptr});
    }
  } else {
    for (const StoreEvent& e : history_) {
      if (e.resource_version > *from && e.key.compare(0, prefix.size(), prefix) == 0) s->Push(e);
    }
  }
  subscriptions_.push_back(s);
  return s;
}

}  // namespace lockstep::local
