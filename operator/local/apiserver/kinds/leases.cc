// Leases (coordination.k8s.io/v1): a lease lasts a positive number of seconds and changes
// hands a non-negative number of times, as pkg/apis/coordination/validation checks.

#include "operator/api/json_reader.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

class Leases final : public KindStrategy {
 public:
  api::FieldErrors Validate(const ResourceType&, const json& obj, const json*) const override {
    api::FieldErrors errors;
    const json* spec = api::ObjectAt(obj, "spec");
    if (!spec) return errors;
    auto check = [&](const char* field, int64_t min, const char* why) {
      auto it = spec->find(field);
      if (it == spec->end() || it->is_null()) return;
      if (!it->is_number_integer() || it->get<int64_t>() < min) {
        errors.push_back(
            api::Invalid(api::FieldPath("spec").Child(field), api::RenderValue(*it), why));
      }
    };
    check("leaseDurationSeconds", 1, "must be greater than 0");
    check("leaseTransitions", 0, "must be greater than or equal to 0");
    return errors;
  }
};

}  // namespace

const KindStrategy& LeaseStrategy() {
  static const Leases leases;
  return leases;
}

}  // namespace lockstep::local
