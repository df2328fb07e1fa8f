#include "operator/runtime/watcher.h"

#include <atomic>
#include <memory>

#include "common/log.h"
#include "operator/api/json_reader.h"
#include "operator/kube/api_error.h"

namespace lockstep::runtime {

using kube::WatchEvent;

namespace {

// The resourceVersion in an object's metadata, or "".
std::string ResourceVersionOf(const nlohmann::json& object) {
  const nlohmann::json* meta = api::ObjectAt(object, "metadata");
  return meta ? api::StringAt(*meta, "resourceVersion") : "";
}

}  // namespace

WatcherMachine::WatcherMachine(BackoffPolicy backoff, uint64_t seed) : backoff_(backoff, seed) {}

const char* WatcherMachine::StateName(State s) {
  switch (s) {
    case State::kListing:
      return "Listing";
    case State::kListBackoff:
      return "ListBackoff";
    case State::kWatching:
      return "Watching";
    case State::kWatchBackoff:
      return "WatchBackoff";
  }
  return "?";
}

WatcherAction WatcherMachine::Start() {
  state_ = State::kListing;
  return {.kind = WatcherAction::Kind::kList};
}

WatcherAction WatcherMachine::Wait() {
  return {.kind = WatcherAction::Kind::kWait, .wait = backoff_.Next()};
}

WatcherAction WatcherMachine::OnListed(const std::string& resource_version) {
  if (resource_version.empty()) {
    // Watching from "" would start at "now" and miss what happened since the list.
    return OnListFailed(absl::DataLossError("list without a resourceVersion"));
  }
  backoff_.Reset();
  resource_version_ = resource_version;
  state_ = State::kWatching;
  delivered_ = false;
  return {.kind = WatcherAction::Kind::kWatch, .resource_version = resource_version_};
}

WatcherAction WatcherMachine::OnListFailed(const absl::Status&) {
  state_ = State::kListBackoff;
  return Wait();
}

WatcherAction WatcherMachine::OnEvent(const WatchEvent& event) {
  switch (event.type) {
    case WatchEvent::Type::kError:
      return OnWatchFailed(kube::ErrorFromStatusObject(event.object, "watch"));
    case WatchEvent::Type::kBookmark: {
      std::string rv = ResourceVersionOf(event.object);
      if (!rv.empty()) resource_version_ = rv;
      return {.kind = WatcherAction::Kind::kIgnore};
    }
    default: {
      std::string rv = ResourceVersionOf(event.object);
      if (!rv.empty()) resource_version_ = rv;
      if (!delivered_) backoff_.Reset();
      delivered_ = true;
      return {.kind = WatcherAction::Kind::kDeliver};
    }
  }
}

WatcherAction WatcherMachine::OnWatchFailed(const absl::Status& error) {
  if (kube::IsApiGone(error)) {
    resource_version_.clear();
    state_ = State::kListing;
    return {.kind = WatcherAction::Kind::kList};
  }
  state_ = State::kWatchBackoff;
  return Wait();
}

WatcherAction WatcherMachine::OnWatchEnded() {
  state_ = State::kWatching;
  delivered_ = false;
  return {.kind = WatcherAction::Kind::kWatch, .resource_version = resource_version_};
}

WatcherAction WatcherMachine::OnWaitOver() {
  if (state_ == State::kListBackoff) {
    state_ = State::kListing;
    return {.kind = WatcherAction::Kind::kList};
  }
  state_ = State::kWatching;
  delivered_ = false;
  return {.kind = WatcherAction::Kind::kWatch, .resource_version = resource_version_};
}

Watcher::Watcher(kube::RestClient* client, kube::Resource resource, WatcherOptions options,
                 common::Clock* clock, WatchSink* sink)
    : client_(client),
      resource_(std::move(resource)),
      options_(std::move(options)),
      clock_(clock),
      sink_(sink),
      machine_(options_.backoff, options_.seed),
      rng_(options_.seed) {}

void Watcher::Run(std::stop_token stop) {
  const std::string component = "watcher/" + resource_.plural;
  WatcherAction action = machine_.Start();
  while (!stop.stop_requested()) {
    switch (action.kind) {
      case WatcherAction::Kind::kList: {
        absl::StatusOr<nlohmann::json> list =
            client_->ListAll(resource_, options_.namespace_,
                             {.label_selector = options_.label_selector,
                              .field_selector = options_.field_selector,
                              .limit = options_.page_size});
        if (stop.stop_requested()) return;
        if (!list.ok()) {
          common::LogWarning(component, "list failed: ", list.status().message());
          action = machine_.OnListFailed(list.status());
          break;
        }
        std::vector<nlohmann::json> items;
        if (auto it = list->find("items"); it != list->end() && it->is_array()) {
          items.reserve(it->size());
          for (nlohmann::json& item : *it) items.push_back(std::move(item));
        }
        std::string rv = ResourceVersionOf(*list);
        if (rv.empty()) {
          common::LogWarning(component, "list answered without metadata.resourceVersion");
          action = machine_.OnListed(rv);
          break;
        }
        common::LogDebug(component, "listed ", items.size(), " at resourceVersion ", rv);
        sink_->Replace(std::move(items), rv);
        action = machine_.OnListed(rv);
        break;
      }
      case WatcherAction::Kind::kWait:
        common::LogDebug(component, "retrying in ", absl::FormatDuration(action.wait));
        if (!clock_->SleepFor(action.wait, stop)) return;
        action = machine_.OnWaitOver();
        break;
      case WatcherAction::Kind::kWatch:
        action = Watch(action.resource_version, stop);
        break;
      case WatcherAction::Kind::kDeliver:
      case WatcherAction::Kind::kIgnore:
        action = machine_.OnWatchEnded();  // not reached: Watch() consumes these
        break;
    }
  }
}

WatcherAction Watcher::Watch(const std::string& resource_version, std::stop_token stop) {
  const std::string component = "watcher/" + resource_.plural;
  int64_t base = std::max<int64_t>(1, absl::ToInt64Seconds(options_.rotation));
  int64_t timeout = base + static_cast<int64_t>(rng_() % static_cast<uint64_t>(base));
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> opened =
      client_->Watch(resource_, options_.namespace_,
                     {.label_selector = options_.label_selector,
                      .field_selector = options_.field_selector,
                      .resource_version = resource_version,
                      .allow_bookmarks = true,
                      .timeout_seconds = timeout});
  if (stop.stop_requested()) return machine_.OnWatchEnded();
  if (!opened.ok()) {
    common::LogWarning(component, "watch failed: ", opened.status().message());
    return machine_.OnWatchFailed(opened.status());
  }
  std::shared_ptr<kube::WatchStream> stream = std::move(*opened);
  auto rotated = std::make_shared<std::atomic<bool>>(false);
  common::Clock::TimerId rotation = clock_->Schedule(
      clock_->Monotonic() + absl::Seconds(timeout) + absl::Seconds(30), [stream, rotated] {
        rotated->store(true);
        stream->Cancel();
      });
  std::stop_callback cancel_on_stop(stop, [stream] { stream->Cancel(); });
  WatcherAction next;
  while (true) {
    absl::StatusOr<std::optional<WatchEvent>> event = stream->Next();
    if (!event.ok()) {
      if (stop.stop_requested() || rotated->load()) {
        next = machine_.OnWatchEnded();
      } else {
        common::LogWarning(component, "watch broke: ", event.status().message());
        next = machine_.OnWatchFailed(event.status());
      }
      break;
    }
    if (!event->has_value()) {
      next = machine_.OnWatchEnded();
      break;
    }
    WatcherAction a = machine_.OnEvent(**event);
    if (a.kind == WatcherAction::Kind::kDeliver) {
      sink_->Apply(std::move(**event));
    } else if (a.kind != WatcherAction::Kind::kIgnore) {
      if ((*event)->type == WatchEvent::Type::kError) {
        common::LogWarning(component, "watch error event: ", kube::DumpJson((*event)->object));
      }
      next = a;
      break;
    }
  }
  clock_->Cancel(rotation);
  stream->Cancel();
  return next;
}

}  // namespace lockstep::runtime
