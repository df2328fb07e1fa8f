#include "operator/runtime/event_recorder.h"

#include "common/log.h"
#include "operator/kube/api_error.h"

namespace lockstep::runtime {

namespace {

std::string Timestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

}  // namespace

EventRecorder::EventRecorder(kube::RestClient* client, kube::Clock* clock,
                             EventRecorderOptions options)
    : client_(client), clock_(clock), options_(std::move(options)) {}

void EventRecorder::Record(const ObjectReference& object, EventType type, const std::string& reason,
                           const std::string& message) {
  const char* type_name = type == EventType::kWarning ? "Warning" : "Normal";
  Key key{object.uid.empty() ? object.namespace_ + "/" + object.name : object.uid, object.kind,
          type_name, reason, message};
  absl::Time now = clock_->Now();
  absl::Time mono = clock_->Monotonic();
  std::string ns = object.namespace_.empty() ? "default" : object.namespace_;

  std::unique_lock lock(mu_);
  auto it = seen_.find(key);
  if (it != seen_.end() && mono - it->second.last_mono < options_.window) {
    Seen& s = it->second;
    s.count += 1;
    s.last_mono = mono;
    lru_.splice(lru_.begin(), lru_, s.lru);
    std::string name = s.event_name;
    nlohmann::json patch = {{"count", s.count}, {"lastTimestamp", Timestamp(now)}};
    lock.unlock();
    absl::StatusOr<nlohmann::json> r =
        client_->Patch(kube::resources::kEvents, ns, name, kube::PatchType::kMerge, patch);
    if (r.ok()) return;
    if (!kube::IsApiNotFound(r.status())) {
      common::LogWarning("events", "could not update event ", ns, "/", name, ": ",
                         r.status().message());
      return;  // best effort: no duplicate for a transient failure
    }
    // The server expired the event (events live an hour): record it afresh.
    lock.lock();
    it = seen_.find(key);
  }
  if (it != seen_.end()) {
    lru_.erase(it->second.lru);
    seen_.erase(it);
  }
  std::string name = StrCat(object.name, ".", absl::ToUnixNanos(now), ++sequence_);
  lru_.push_front(key);
  seen_[key] = Seen{name, 1, now, mono, lru_.begin()};
  while (seen_.size() > options_.max_tracked) {
    seen_.erase(lru_.back());
    lru_.pop_back();
  }
  lock.unlock();

  nlohmann::json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", name}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", object.api_version},
        {"kind", object.kind},
        {"namespace", object.namespace_},
        {"name", object.name},
        {"uid", object.uid}}},
      {"type", type_name},
      {"reason", reason},
      {"message", message},
      {"count", 1},
      {"firstTimestamp", Timestamp(now)},
      {"lastTimestamp", Timestamp(now)},
      {"source", {{"component", options_.component}}},
      {"reportingComponent", options_.component},
  };
  absl::StatusOr<nlohmann::json> r = client_->Create(kube::resources::kEvents, ns, event);
  if (!r.ok()) {
    std::lock_guard relock(mu_);
    if (auto failed = seen_.find(key); failed != seen_.end() && failed->second.event_name == name) {
      lru_.erase(failed->second.lru);
      seen_.erase(failed);  // the next repeat creates the event instead of patching nothing
    }
    common::LogWarning("events", "could not record ", reason, " for ", object.kind, " ",
                       object.namespace_, "/", object.name, ": ", r.status().message());
  }
}

}  // namespace lockstep::runtime
