#pragma once
// Label selectors as the API server parses them: "app=web,tier!=db,env in (a,b),!legacy,gpu".
// Operators: =, ==, !=, in, notin, exists (bare key) and does-not-exist (!key). Requirements
// are ANDed; the empty selector matches everything. Used by caches and the local API server.
// Thread-safety: immutable after Parse.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::kube {

class LabelSelector {
 public:
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };

  LabelSelector() = default;  // matches everything
  static absl::StatusOr<LabelSelector> Parse(std::string_view text);
  // From a metav1.LabelSelector's matchLabels (matchExpressions are added by the caller).
  static LabelSelector FromMap(const std::map<std::string, std::string>& labels);

  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }
  std::string ToString() const;

 private:
  std::vector<Requirement> requirements_;
};

}  // namespace lockstep::kube
