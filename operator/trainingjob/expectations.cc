#include "operator/trainingjob/expectations.h"

#include "common/log.h"

namespace lockstep::trainingjob {

void Expectations::Expect(const std::string& job_key, const std::string& item) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[job_key];
  if (e.items.empty()) e.since = clock_->Monotonic();
  e.items.insert(item);
}

void Expectations::Observe(const std::string& job_key, const std::string& item) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(job_key);
  if (it == entries_.end()) return;
  it->second.items.erase(item);
  if (it->second.items.empty()) entries_.erase(it);
}

bool Expectations::Satisfied(const std::string& job_key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(job_key);
  if (it == entries_.end()) return true;
  if (clock_->Monotonic() - it->second.since < timeout_) return false;
  common::LogWarning("expectations", job_key, ": ", it->second.items.size(),
                     " expected watch events did not arrive within ",
                     absl::FormatDuration(timeout_), "; planning from the cache as it is");
  entries_.erase(it);
  return true;
}

void Expectations::Forget(const std::string& job_key) {
  std::lock_guard lock(mu_);
  entries_.erase(job_key);
}

size_t Expectations::Outstanding(const std::string& job_key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(job_key);
  return it == entries_.end() ? 0 : it->second.items.size();
}

}  // namespace lockstep::trainingjob
