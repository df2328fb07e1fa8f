#pragma once
// Expectations: what this operator has asked the API server to create or delete for a job and
// not yet seen come back through its informers. While a job has outstanding expectations its
// caches are known to lag behind its own writes, so the reconciler does not plan from them;
// that is what keeps a lagging cache from causing a duplicate create or a second delete (the
// pattern of Kubernetes' ControllerExpectations). An expectation that is not observed within
// `timeout` (a lost watch event) is dropped, so a job is never stuck.
// Items are free-form strings: "pods/<name>" for a create, "pods-uid/<uid>" for a delete.
// Thread-safety: thread-safe.

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"

namespace lockstep::trainingjob {

class Expectations {
 public:
  Expectations(common::Clock* clock, absl::Duration timeout = absl::Minutes(5))
      : clock_(clock), timeout_(timeout) {}

  void Expect(const std::string& job_key, const std::string& item);
  // The informer saw it, or the request failed and it will never be seen.
  void Observe(const std::string& job_key, const std::string& item);
  // True when nothing is outstanding, or what is outstanding has timed out (then cleared).
  bool Satisfied(const std::string& job_key);
  void Forget(const std::string& job_key);
  size_t Outstanding(const std::string& job_key) const;

 private:
  struct Entry {
    std::set<std::string> items;
    absl::Time since;
  };
  common::Clock* clock_;
  absl::Duration timeout_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace lockstep::trainingjob
