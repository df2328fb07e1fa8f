#pragma once
// EventRecorder: writes core/v1 Events about objects, as client-go's event broadcaster does,
// on a write budget of its own so that an Event never delays the work it describes:
//  - Record() never blocks on the API: it decides what to write and queues it; one writer
//    thread writes the queue in order, through its own token bucket (`qps`/`burst`), not the
//    client's. A full queue drops the event (counted), as client-go's broadcaster does, except
//    that a Warning takes the place of the oldest Normal event queued.
//  - Spam filter: each object may have `object_burst` events at once, then one per
//    1/`object_qps` seconds (client-go: 25, then one per 5 minutes); the rest are dropped.
//  - Essential events (a state change, a terminal reason: `essential`) bypass the spam filter
//    and aggregation, and a full queue makes room for them by dropping the oldest event that
//    is not essential (or grows past its size by one): they are what `kubectl describe` must
//    end on, however many events came before.
//  - Aggregation: an object's events of one type and reason with more than `similar_max`
//    different messages within `window` become one Event, "(combined from similar events): "
//    and the latest message, whose count grows.
//  - Repeats: an event with the same object, type, reason and message as one recorded within
//    `window` does not create a new Event; the existing one gets count+1 and a new
//    lastTimestamp (a merge patch), as kubectl describe shows "(x5 over 3m)". One the server
//    has expired (NotFound) is created afresh.
// Recording is best effort: failures are logged and counted, never returned, so a reconcile
// never fails because an event could not be written. With `metrics`, outcomes are counted in
// lockstep_events_total{outcome=created|updated|dropped_spam|dropped_queue_full|failed}.
// Thread-safety: thread-safe. The destructor stops the writer after its write in flight;
// events still queued then are dropped.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "operator/kube/rate_limiter.h"
#include "operator/kube/rest_client.h"

namespace lockstep::runtime {

struct ObjectReference {
  std::string api_version;
  std::string kind;
  std::string namespace_;
  std::string name;
  std::string uid;
};

enum class EventType { kNormal, kWarning };

struct EventRecorderOptions {
  std::string component = "lockstep-operator";
  absl::Duration window = absl::Minutes(10);
  size_t max_tracked = 4096;  // distinct events (and objects) remembered (LRU)
  // The events' own write budget; qps <= 0 writes as fast as the server answers.
  double qps = 50;
  int burst = 100;
  // Per object: this many events at once, then one per 1/object_qps seconds.
  double object_qps = 1.0 / 300;
  int object_burst = 25;
  size_t similar_max = 10;  // different messages of one type and reason before combining
  size_t queue_size = 1000;
  common::MetricsRegistry* metrics = nullptr;
};

class EventRecorder {
 public:
  // Pointers must outlive the recorder. Writes go through a copy of `client` without its
  // throttle: the recorder's own budget replaces it.
  EventRecorder(kube::RestClient* client, common::Clock* clock, EventRecorderOptions options = {});
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  void Record(const ObjectReference& object, EventType type, const std::string& reason,
              const std::string& message, bool essential = false);

  // Blocks until every event queued so far is written (or dropped); false after `timeout`.
  // For tests and for a caller that wants its events out before it goes on.
  bool Flush(absl::Duration timeout = absl::Seconds(30));

 private:
  // Keys are hashes of the strings they stand for (object, kind, type, reason, message): the
  // recorder remembers thousands of events, and 64 bits tell them apart.
  using Key = uint64_t;
  struct Seen {
    std::string event_name;
    int64_t count = 0;
    absl::Time first;  // wall
    absl::Time last_mono;
    std::list<Key>::iterator lru;
  };
  struct Similar {  // an object's events of one type and reason, for aggregation
    absl::Time since;
    std::set<uint64_t> messages;  // hashed
  };
  struct ObjectBudget {  // the spam filter's bucket for one object
    double tokens = 0;
    absl::Time last;
  };
  // What to write, kept small while queued: the JSON is made by the writer.
  struct Write {
    Key key;
    bool combined = false;
    std::string ns;
    std::string name;
    ObjectReference object;
    EventType type = EventType::kNormal;
    bool essential = false;
    std::string reason;
    std::string message;
    int64_t count = 1;  // above 1: a repeat, patched (created whole if the server expired it)
    absl::Time first, last;
  };
  nlohmann::json EventJson(const Write& w) const;

  void Count(const char* outcome);
  bool TakeObjectToken(Key object, absl::Time mono);
  void WriteLoop(std::stop_token stop);
  void Perform(Write& w);
  void Forget(const Key& key, const std::string& event_name);

  kube::RestClient client_;  // unthrottled
  common::Clock* clock_;
  EventRecorderOptions options_;
  kube::TokenBucket budget_;

  std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<Key, Seen> seen_;
  std::list<Key> lru_;                   // most recent first
  std::map<Key, Similar> similar_;       // by object, type and reason
  std::map<Key, ObjectBudget> objects_;  // by object
  std::deque<Write> queue_;
  bool writing_ = false;
  uint64_t sequence_ = 0;
  std::jthread writer_;
};

}  // namespace lockstep::runtime
