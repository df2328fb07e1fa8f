#include "operator/api/cel_rules.h"

namespace lockstep::api {
namespace {

using nlohmann::json;

// CEL's has(): the field is present (a defaulted one is).
const json* Field(const json& obj, std::string_view name) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool ElasticBounds(const json& spec) {
  const json* run = Field(spec, "runPolicy");
  const json* elastic = run ? Field(*run, "elastic") : nullptr;
  const json* specs = Field(spec, "replicaSpecs");
  const json* worker = specs ? Field(*specs, "Worker") : nullptr;
  if (elastic == nullptr || worker == nullptr) return true;
  const json* replicas = Field(*worker, "replicas");
  const json* min = Field(*elastic, "minReplicas");
  const json* max = Field(*elastic, "maxReplicas");
  // A missing or mistyped field is an evaluation error in CEL: the write is refused.
  if (!replicas || !min || !max || !replicas->is_number_integer() || !min->is_number_integer() ||
      !max->is_number_integer()) {
    return false;
  }
  const auto n = replicas->get<int64_t>();
  return n >= min->get<int64_t>() && n <= max->get<int64_t>();
}

}  // namespace

std::optional<bool> EvaluateKnownRule(std::string_view rule, const json& self) {
  if (rule == kElasticBoundsRule) return ElasticBounds(self);
  return std::nullopt;
}

}  // namespace lockstep::api
