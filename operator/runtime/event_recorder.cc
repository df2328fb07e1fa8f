#include "operator/runtime/event_recorder.h"

#include <algorithm>

#include "common/log.h"
#include "operator/kube/api_error.h"

namespace lockstep::runtime {

namespace {

constexpr char kCombinedPrefix[] = "(combined from similar events): ";
constexpr char kEventsMetric[] = "lockstep_events_total";

std::string Timestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

// A hash of strings, each ended by a separator no event field holds.
uint64_t Hash(std::initializer_list<std::string_view> parts) {
  std::string joined;
  for (std::string_view p : parts) joined.append(p).push_back('\0');
  return std::hash<std::string>{}(joined);
}

const char* TypeName(EventType type) { return type == EventType::kWarning ? "Warning" : "Normal"; }

// Keeps a map within `limit` entries: past it, erases those `stale` says may go, then any,
// down to 3/4 of the limit, so that the scan comes once per limit/4 inserts, not on each.
template <typename Map, typename Stale>
void Bound(Map& m, size_t limit, Stale stale) {
  if (m.size() <= limit) return;
  std::erase_if(m, [&](const auto& entry) { return stale(entry.second); });
  while (m.size() > limit * 3 / 4) m.erase(m.begin());
}

}  // namespace

EventRecorder::EventRecorder(kube::RestClient* client, common::Clock* clock,
                             EventRecorderOptions options)
    : client_(client->WithThrottle(nullptr)),
      clock_(clock),
      options_(std::move(options)),
      budget_(options_.qps, options_.burst, clock) {
  if (options_.metrics != nullptr) {
    options_.metrics->AddCounter(kEventsMetric,
                                 "Events recorded, by outcome: created, updated (a repeat), "
                                 "dropped_spam, dropped_queue_full, failed.");
  }
  writer_ = std::jthread([this](std::stop_token stop) { WriteLoop(stop); });
}

EventRecorder::~EventRecorder() {
  writer_.request_stop();
  cv_.notify_all();
  writer_.join();
  std::lock_guard lock(mu_);
  if (!queue_.empty()) {
    common::LogInfo("events", "stopping with ", queue_.size(), " events unwritten");
  }
}

void EventRecorder::Count(const char* outcome) {
  if (options_.metrics != nullptr) options_.metrics->Inc(kEventsMetric, {{"outcome", outcome}});
}

bool EventRecorder::TakeObjectToken(Key object, absl::Time mono) {
  const double burst = std::max(1, options_.object_burst);
  auto [it, fresh] = objects_.try_emplace(object, ObjectBudget{burst, mono});
  ObjectBudget& b = it->second;
  if (!fresh && options_.object_qps > 0) {
    b.tokens =
        std::min(burst, b.tokens + absl::ToDoubleSeconds(mono - b.last) * options_.object_qps);
    b.last = mono;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  if (fresh) {
    // A bucket that has refilled is the same as none.
    Bound(objects_, options_.max_tracked, [&](const ObjectBudget& o) {
      return o.tokens + absl::ToDoubleSeconds(mono - o.last) * options_.object_qps >= burst;
    });
  }
  return true;
}

void EventRecorder::Record(const ObjectReference& object, EventType type, const std::string& reason,
                           const std::string& message, bool essential) {
  const char* type_name = TypeName(type);
  const std::string object_id =
      object.uid.empty() ? object.namespace_ + "/" + object.name : object.uid;
  absl::Time now = clock_->Now();
  absl::Time mono = clock_->Monotonic();
  std::string ns = object.namespace_.empty() ? "default" : object.namespace_;

  std::unique_lock lock(mu_);
  if (!essential && !TakeObjectToken(Hash({object_id, object.kind}), mono)) {
    lock.unlock();
    Count("dropped_spam");
    return;
  }

  // Aggregation: past `similar_max` different messages, one combined Event.
  std::string text = message;
  bool combined = false;
  {
    Similar& similar = similar_[Hash({object_id, object.kind, type_name, reason})];
    if (similar.messages.empty() || mono - similar.since >= options_.window) {
      similar = Similar{mono, {}};
    }
    if (essential || similar.messages.size() < options_.similar_max) {
      similar.messages.insert(Hash({message}));
    } else {
      text = kCombinedPrefix + message;
      combined = true;
    }
    Bound(similar_, options_.max_tracked,
          [&](const Similar& s) { return mono - s.since >= options_.window; });
  }

  if (queue_.size() >= options_.queue_size) {
    // Full: an essential event takes the place of the oldest one that is not (or is queued
    // past the size when all are); a Warning that of the oldest Normal one that is not
    // essential; otherwise the event goes.
    auto victim = std::find_if(queue_.begin(), queue_.end(), [&](const Write& q) {
      if (q.essential) return false;
      return essential || (type == EventType::kWarning && q.type == EventType::kNormal);
    });
    if (victim != queue_.end()) {
      queue_.erase(victim);
      Count("dropped_queue_full");
    } else if (!essential) {
      lock.unlock();
      Count("dropped_queue_full");
      return;
    }
  }

  const Key key = Hash({object_id, object.kind, type_name, reason, combined ? "" : message,
                        combined ? "combined" : ""});
  Write w{.key = key,
          .combined = combined,
          .ns = ns,
          .object = object,
          .type = type,
          .essential = essential,
          .reason = reason,
          .message = text,
          .last = now};
  auto it = seen_.find(key);
  if (it != seen_.end() && mono - it->second.last_mono < options_.window) {
    Seen& s = it->second;
    w.count = ++s.count;
    w.first = s.first;
    w.name = s.event_name;
    s.last_mono = mono;
    lru_.splice(lru_.begin(), lru_, s.lru);
  } else {
    if (it != seen_.end()) {
      lru_.erase(it->second.lru);
      seen_.erase(it);
    }
    w.first = now;
    w.name = StrCat(object.name, ".", absl::ToUnixNanos(now), ++sequence_);
    lru_.push_front(key);
    seen_[key] = Seen{w.name, 1, now, mono, lru_.begin()};
    while (seen_.size() > options_.max_tracked) {
      seen_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  queue_.push_back(std::move(w));
  lock.unlock();
  cv_.notify_all();
}

void EventRecorder::WriteLoop(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, stop, [&] { return !queue_.empty(); });
    if (stop.stop_requested()) return;
    Write w = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    if (budget_.Wait(stop)) Perform(w);
    lock.lock();
    writing_ = false;
    cv_.notify_all();
  }
}

void EventRecorder::Forget(const Key& key, const std::string& event_name) {
  std::lock_guard lock(mu_);
  if (auto it = seen_.find(key); it != seen_.end() && it->second.event_name == event_name) {
    lru_.erase(it->second.lru);
    seen_.erase(it);
  }
}

nlohmann::json EventRecorder::EventJson(const Write& w) const {
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", w.name}, {"namespace", w.ns}}},
      {"involvedObject",
       {{"apiVersion", w.object.api_version},
        {"kind", w.object.kind},
        {"namespace", w.object.namespace_},
        {"name", w.object.name},
        {"uid", w.object.uid}}},
      {"type", TypeName(w.type)},
      {"reason", w.reason},
      {"message", w.message},
      {"count", w.count},
      {"firstTimestamp", Timestamp(w.first)},
      {"lastTimestamp", Timestamp(w.last)},
      {"source", {{"component", options_.component}}},
      {"reportingComponent", options_.component},
  };
}

void EventRecorder::Perform(Write& w) {
  if (w.count > 1) {
    nlohmann::json patch = {{"count", w.count}, {"lastTimestamp", Timestamp(w.last)}};
    if (w.combined) patch["message"] = w.message;
    absl::StatusOr<nlohmann::json> r =
        client_.Patch(kube::resources::kEvents, w.ns, w.name, kube::PatchType::kMerge, patch);
    if (r.ok()) {
      Count("updated");
      return;
    }
    if (!kube::IsApiNotFound(r.status())) {
      common::LogWarning("events", "could not update event ", w.ns, "/", w.name, ": ",
                         r.status().message());
      Count("failed");
      return;  // best effort: no duplicate for a transient failure
    }
    // The server expired the event (events live an hour): it is created again, whole.
  }
  absl::StatusOr<nlohmann::json> r = client_.Create(kube::resources::kEvents, w.ns, EventJson(w));
  if (r.ok()) {
    Count("created");
    return;
  }
  Forget(w.key, w.name);  // the next repeat creates the event instead of patching nothing
  Count("failed");
  common::LogWarning("events", "could not record ", w.reason, " for ", w.object.kind, " ", w.ns,
                     "/", w.object.name, ": ", r.status().message());
}

bool EventRecorder::Flush(absl::Duration timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                      [&] { return queue_.empty() && !writing_; });
}

}  // namespace lockstep::runtime
