#pragma once
// Progress: reading the chief's GET /progress (DESIGN section 3), which the operator copies
// into status.progress. The JSON is status.progress without summary and updateTime:
//   {"step":450,"totalSteps":1000,"epoch":2,"loss":0.41,"metrics":{"accuracy":0.87},
//    "samplesPerSecond":5400.5,"lastCheckpointStep":400,"estimatedRemainingSeconds":95}
// Thread-safety: ParseProgress is pure; a ProgressSource may be called from many threads.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/api/trainingjob_types.h"

namespace lockstep::trainingjob {

// InvalidArgument naming the field when the body is not valid progress JSON.
absl::StatusOr<api::Progress> ParseProgress(std::string_view body);

class ProgressSource {
 public:
  virtual ~ProgressSource() = default;
  virtual absl::StatusOr<api::Progress> Fetch(const std::string& pod_ip, int32_t port) = 0;
};

// GET http://<pod_ip>:<port>/progress with `timeout` for the whole exchange.
std::unique_ptr<ProgressSource> NewHttpProgressSource(absl::Duration timeout = absl::Seconds(2));

}  // namespace lockstep::trainingjob
