#pragma once
// EventRecorder: writes core/v1 Events about objects, aggregating repeats. An event with the
// same object, type, reason and message as one recorded within `window` does not create a new
// Event; the existing one gets count+1 and a new lastTimestamp (a merge patch), as kubectl
// describe shows "(x5 over 3m)". Recording is best effort: failures are logged, never
// returned, so a reconcile never fails because an event could not be written.
// Thread-safety: thread-safe.

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "absl/time/time.h"
#include "operator/kube/clock.h"
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
  size_t max_tracked = 4096;  // distinct events remembered for aggregation (LRU)
};

class EventRecorder {
 public:
  // Pointers must outlive the recorder.
  EventRecorder(kube::RestClient* client, kube::Clock* clock, EventRecorderOptions options = {});

  void Record(const ObjectReference& object, EventType type, const std::string& reason,
              const std::string& message);

 private:
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;
  struct Seen {
    std::string event_name;
    int64_t count = 0;
    absl::Time first;
    absl::Time last_mono;
    std::list<Key>::iterator lru;
  };

  kube::RestClient* client_;
  kube::Clock* clock_;
  EventRecorderOptions options_;
  std::mutex mu_;
  std::map<Key, Seen> seen_;
  std::list<Key> lru_;  // most recent first
  uint64_t sequence_ = 0;
};

}  // namespace lockstep::runtime
