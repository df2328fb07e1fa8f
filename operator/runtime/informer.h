#pragma once
// Informer<T>: a Watcher that decodes objects into T, keeps them in a Cache<T>, and tells
// handlers what changed. Handlers run on the informer's thread after the cache was updated, so
// a handler that enqueues a key lets the reconciler see the new state; they must not block
// (enqueue keys, no I/O). A relist (first list, or after 410 Gone) is diffed against the
// cache: handlers see adds, updates and deletes as if they had been watched.
// An object that fails to decode is left out of the cache and reported to the decode-error
// handler; it does not stop the informer, and neither does a handler that throws.
// Thread-safety: Run() on one thread; everything else from any thread.

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <stop_token>
#include <vector>

#include "absl/status/statusor.h"
#include "common/log.h"
#include "operator/kube/rest_client.h"
#include "operator/runtime/cache.h"
#include "operator/runtime/watcher.h"

namespace lockstep::runtime {

template <typename T>
struct EventHandlers {
  std::function<void(const std::shared_ptr<const T>&)> on_add;
  std::function<void(const std::shared_ptr<const T>& old_obj, const std::shared_ptr<const T>&)>
      on_update;
  std::function<void(const std::shared_ptr<const T>&)> on_delete;
};

template <typename T>
class Informer final : public WatchSink {
 public:
  using Ptr = std::shared_ptr<const T>;
  using Decoder = std::function<absl::StatusOr<T>(const nlohmann::json&)>;

  Informer(kube::RestClient* client, kube::Resource resource, Decoder decode,
           WatcherOptions options, common::Clock* clock)
      : decode_(std::move(decode)),
        component_("informer/" + resource.plural),
        watcher_(client, std::move(resource), std::move(options), clock, this) {}

  // Before Run().
  void AddHandlers(EventHandlers<T> handlers) { handlers_.push_back(std::move(handlers)); }
  void OnDecodeError(std::function<void(const absl::Status&)> f) { decode_error_ = std::move(f); }

  void Run(std::stop_token stop) { watcher_.Run(stop); }

  const Cache<T>& cache() const { return cache_; }
  Cache<T>& mutable_cache() { return cache_; }  // for AddIndex before Run()
  bool HasSynced() const { return synced_.load(); }
  // Blocks until the first list is in the cache; false when `stop` came first.
  bool WaitForSync(std::stop_token stop) {
    std::unique_lock lock(sync_mu_);
    return sync_cv_.wait(lock, stop, [&] { return synced_.load(); });
  }
  uint64_t decode_errors() const { return decode_errors_.load(); }

  // WatchSink.
  void Replace(std::vector<nlohmann::json> items, const std::string&) override {
    std::vector<Ptr> objects;
    objects.reserve(items.size());
    for (const nlohmann::json& item : items) {
      if (Ptr p = Decode(item)) objects.push_back(std::move(p));
    }
    std::vector<Ptr> fresh = objects;
    std::unordered_map<std::string, Ptr> old = cache_.Replace(std::move(objects));
    for (const Ptr& obj : fresh) {
      auto it = old.find(KeyOf(MetaOf(*obj)));
      if (it == old.end()) {
        Notify([&](const EventHandlers<T>& h) {
          if (h.on_add) h.on_add(obj);
        });
        continue;
      }
      Ptr previous = std::move(it->second);
      old.erase(it);
      if (ResourceVersionOf(MetaOf(*previous)) != ResourceVersionOf(MetaOf(*obj))) {
        Notify([&](const EventHandlers<T>& h) {
          if (h.on_update) h.on_update(previous, obj);
        });
      }
    }
    for (const auto& entry : old) {
      const Ptr& gone = entry.second;
      Notify([&](const EventHandlers<T>& h) {
        if (h.on_delete) h.on_delete(gone);
      });
    }
    {
      std::lock_guard lock(sync_mu_);
      synced_ = true;
    }
    sync_cv_.notify_all();
  }

  void Apply(kube::WatchEvent event) override {
    Ptr obj = Decode(event.object);
    if (!obj) return;
    if (event.type == kube::WatchEvent::Type::kDeleted) {
      Ptr old = cache_.Erase(KeyOf(MetaOf(*obj)));
      Ptr last = old ? old : obj;
      Notify([&](const EventHandlers<T>& h) {
        if (h.on_delete) h.on_delete(last);
      });
      return;
    }
    Ptr old = cache_.Upsert(obj);
    if (old) {
      Notify([&](const EventHandlers<T>& h) {
        if (h.on_update) h.on_update(old, obj);
      });
    } else {
      Notify([&](const EventHandlers<T>& h) {
        if (h.on_add) h.on_add(obj);
      });
    }
  }

 private:
  Ptr Decode(const nlohmann::json& j) {
    absl::StatusOr<T> obj = decode_(j);
    if (obj.ok()) return std::make_shared<const T>(std::move(*obj));
    ++decode_errors_;
    common::LogWarning(component_,
                       "skipping an object that does not decode: ", obj.status().message());
    if (decode_error_) decode_error_(obj.status());
    return nullptr;
  }

  // A handler that throws is a bug in it; it is logged and must not stop the informer.
  template <typename F>
  void Notify(F f) {
    for (const EventHandlers<T>& h : handlers_) {
      try {
        f(h);
      } catch (const std::exception& e) {
        common::LogError(component_, "event handler threw: ", e.what());
      } catch (...) {
        common::LogError(component_, "event handler threw");
      }
    }
  }

  Decoder decode_;
  std::string component_;
  Cache<T> cache_;
  Watcher watcher_;
  std::vector<EventHandlers<T>> handlers_;
  std::function<void(const absl::Status&)> decode_error_;
  std::atomic<uint64_t> decode_errors_{0};
  std::atomic<bool> synced_{false};
  std::mutex sync_mu_;
  std::condition_variable_any sync_cv_;
};

}  // namespace lockstep::runtime
