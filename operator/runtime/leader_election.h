#pragma once
// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection.
//
// A candidate reads the Lease; it takes it when nobody holds it, when it holds it already
// (renew), or when the holder's record has not changed for lease_duration of *this process's
// monotonic clock*. The renewTime written in the Lease is never compared with our clock, so
// clock skew between nodes cannot make two leaders. Every write is a PUT with the read
// resourceVersion, so of two candidates racing for an expired lease exactly one wins (the other
// gets 409 Conflict). A leader that cannot renew within renew_deadline stops leading; on
// shutdown a leader releases the lease (empty holder) so a successor need not wait it out.
// Thread-safety: TryAcquireOrRenew and Release are called from Run's thread (or a test's).

#include <functional>
#include <stop_token>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "operator/kube/rest_client.h"

namespace lockstep::runtime {

struct LeaderElectionConfig {
  std::string namespace_;
  std::string name;
  std::string identity;  // unique per process: pod name plus a random suffix
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
};

class LeaderElector {
 public:
  // Pointers must outlive the elector.
  LeaderElector(kube::RestClient* client, LeaderElectionConfig config, common::Clock* clock);

  // One attempt: true when this process holds the lease afterwards.
  absl::StatusOr<bool> TryAcquireOrRenew();
  // Gives the lease up if we hold it.
  absl::Status Release();

  // Campaigns until elected, then runs `lead(leader_stop)` on a new thread while renewing.
  // `leader_stop` is requested when leadership is lost or `stop` is requested; when `lead`
  // returns (or throws) on its own, leading ends too. Run returns after `lead` returned and
  // the lease was released. Returns true if it ever led.
  bool Run(std::stop_token stop, std::function<void(std::stop_token)> lead);

  bool IsLeader() const { return leading_; }
  // The holder seen in the last read ("" when none).
  const std::string& observed_holder() const { return observed_holder_; }

 private:
  nlohmann::json LeaseObject(const std::string& holder, int64_t transitions,
                             const std::string& acquire_time) const;

  kube::RestClient* client_;
  LeaderElectionConfig config_;
  common::Clock* clock_;
  bool leading_ = false;
  std::string observed_holder_;
  std::string observed_record_;  // holder + renewTime + transitions, to detect change
  absl::Time observed_at_;       // monotonic time the record last changed
};

}  // namespace lockstep::runtime
