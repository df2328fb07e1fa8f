// Roles, ClusterRoles and their bindings: names are path segments, as in Kubernetes, so the
// "system:..." names that charts and controllers use are valid.

#include "operator/api/object_meta.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"

namespace lockstep::local {

namespace {

class RbacObjects final : public KindStrategy {
 public:
  std::vector<std::string> ValidateName(const std::string& name) const override {
    return api::CheckPathSegmentName(name);
  }
};

}  // namespace

const KindStrategy& RbacStrategy() {
  static const RbacObjects rbac;
  return rbac;
}

}  // namespace lockstep::local
