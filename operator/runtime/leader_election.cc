#include "operator/runtime/leader_election.h"

#include <exception>
#include <thread>

#include "common/log.h"
#include "operator/api/json_reader.h"
#include "operator/kube/api_error.h"

namespace lockstep::runtime {

namespace {

constexpr char kComponent[] = "leader-election";

std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

int64_t Int(const nlohmann::json& spec, const char* key) {
  auto it = spec.find(key);
  return it != spec.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

}  // namespace

LeaderElector::LeaderElector(kube::RestClient* client, LeaderElectionConfig config,
                             common::Clock* clock)
    : client_(client), config_(std::move(config)), clock_(clock) {}

nlohmann::json LeaderElector::LeaseObject(const std::string& holder, int64_t transitions,
                                          const std::string& acquire_time) const {
  std::string now = MicroTime(clock_->Now());
  nlohmann::json spec = {
      {"holderIdentity", holder},
      {"leaseDurationSeconds", absl::ToInt64Seconds(config_.lease_duration)},
      {"acquireTime", acquire_time.empty() ? now : acquire_time},
      {"renewTime", now},
      {"leaseTransitions", transitions},
  };
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", {{"name", config_.name}, {"namespace", config_.namespace_}}},
          {"spec", spec}};
}

absl::StatusOr<bool> LeaderElector::TryAcquireOrRenew() {
  const kube::Resource& leases = kube::resources::kLeases;
  absl::StatusOr<nlohmann::json> got = client_->Get(leases, config_.namespace_, config_.name);
  if (kube::IsApiNotFound(got.status())) {
    absl::StatusOr<nlohmann::json> created =
        client_->Create(leases, config_.namespace_, LeaseObject(config_.identity, 0, ""));
    if (kube::IsApiAlreadyExists(created.status())) return leading_ = false;
    if (!created.ok()) return created.status();
    common::LogInfo(kComponent, config_.identity, " acquired lease ", config_.namespace_, "/",
                    config_.name, " (created it)");
    observed_holder_ = config_.identity;
    observed_at_ = clock_->Monotonic();
    return leading_ = true;
  }
  if (!got.ok()) return got.status();

  nlohmann::json spec = got->value("spec", nlohmann::json::object());
  if (!spec.is_object()) spec = nlohmann::json::object();
  std::string holder = api::StringAt(spec, "holderIdentity");
  std::string record =
      StrCat(holder, "|", api::StringAt(spec, "renewTime"), "|", Int(spec, "leaseTransitions"));
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = clock_->Monotonic();
  }
  observed_holder_ = holder;
  // The holder's own lease duration counts, as it may differ from ours.
  int64_t duration_s = Int(spec, "leaseDurationSeconds");
  absl::Duration duration = duration_s > 0 ? absl::Seconds(duration_s) : config_.lease_duration;
  bool mine = holder == config_.identity;
  if (!holder.empty() && !mine && clock_->Monotonic() < observed_at_ + duration) {
    return leading_ = false;  // someone else holds a live lease
  }
  int64_t transitions = Int(spec, "leaseTransitions");
  nlohmann::json lease = LeaseObject(config_.identity, mine ? transitions : transitions + 1,
                                     mine ? api::StringAt(spec, "acquireTime") : "");
  lease["metadata"] = got->value("metadata", nlohmann::json::object());
  absl::StatusOr<nlohmann::json> updated = client_->Update(leases, config_.namespace_, lease);
  if (kube::IsApiConflict(updated.status())) return leading_ = false;
  if (!updated.ok()) return updated.status();
  if (!mine) {
    common::LogInfo(kComponent, config_.identity, " acquired lease ", config_.namespace_, "/",
                    config_.name, holder.empty() ? "" : " from " + holder);
  }
  observed_holder_ = config_.identity;
  observed_record_.clear();
  observed_at_ = clock_->Monotonic();
  return leading_ = true;
}

absl::Status LeaderElector::Release() {
  if (!leading_) return absl::OkStatus();
  leading_ = false;
  const kube::Resource& leases = kube::resources::kLeases;
  absl::StatusOr<nlohmann::json> got = client_->Get(leases, config_.namespace_, config_.name);
  if (!got.ok()) return got.status();
  nlohmann::json spec = got->value("spec", nlohmann::json::object());
  if (!spec.is_object() || api::StringAt(spec, "holderIdentity") != config_.identity) {
    return absl::OkStatus();  // someone else took it already
  }
  nlohmann::json lease = LeaseObject("", Int(spec, "leaseTransitions"), "");
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["metadata"] = got->value("metadata", nlohmann::json::object());
  absl::StatusOr<nlohmann::json> updated = client_->Update(leases, config_.namespace_, lease);
  if (!updated.ok()) return updated.status();
  common::LogInfo(kComponent, config_.identity, " released lease ", config_.namespace_, "/",
                  config_.name);
  return absl::OkStatus();
}

bool LeaderElector::Run(std::stop_token stop, std::function<void(std::stop_token)> lead) {
  // Campaign.
  while (true) {
    if (stop.stop_requested()) return false;
    absl::StatusOr<bool> acquired = TryAcquireOrRenew();
    if (!acquired.ok()) common::LogWarning(kComponent, acquired.status().message());
    if (acquired.ok() && *acquired) break;
    if (!clock_->SleepFor(config_.retry_period, stop)) return false;
  }
  // Lead, renewing every retry period until stop or a renewal deadline is missed.
  std::stop_source leader;
  std::jthread worker([&lead, &leader] {
    try {
      lead(leader.get_token());
    } catch (const std::exception& e) {
      common::LogError(kComponent, "the leader's work threw: ", e.what());
    } catch (...) {
      common::LogError(kComponent, "the leader's work threw");
    }
    leader.request_stop();  // nothing left to lead for: stop renewing and release
  });
  absl::Time last_renew = clock_->Monotonic();
  std::stop_callback forward(stop, [&leader] { leader.request_stop(); });
  while (!leader.stop_requested()) {
    if (!clock_->SleepFor(config_.retry_period, leader.get_token())) break;
    absl::StatusOr<bool> renewed = TryAcquireOrRenew();
    if (renewed.ok() && *renewed) {
      last_renew = clock_->Monotonic();
      continue;
    }
    if (!renewed.ok()) common::LogWarning(kComponent, "renew: ", renewed.status().message());
    if (clock_->Monotonic() - last_renew >= config_.renew_deadline || (renewed.ok() && !*renewed)) {
      common::LogError(kComponent, config_.identity, " lost the lease");
      leading_ = false;
      leader.request_stop();
    }
  }
  worker.join();
  if (absl::Status s = Release(); !s.ok()) common::LogWarning(kComponent, "release: ", s.message());
  return true;
}

}  // namespace lockstep::runtime
