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

bool Suspended(const json& spec) {
  const json* run = Field(spec, "runPolicy");
  const json* suspend = run ? Field(*run, "suspend") : nullptr;
  return suspend != nullptr && suspend->is_boolean() && suspend->get<bool>();
}

bool FixedReplicas(const json& spec, const json& old) {
  if (Suspended(spec) && Suspended(old)) return true;
  const json* run = Field(spec, "runPolicy");
  const bool elastic = run != nullptr && Field(*run, "elastic") != nullptr;
  const json* specs = Field(spec, "replicaSpecs");
  const json* old_specs = Field(old, "replicaSpecs");
  for (const char* type : {"Chief", "PS", "Evaluator", "Worker"}) {
    if (elastic && std::string_view(type) == "Worker") continue;
    const json* now = specs ? Field(*specs, type) : nullptr;
    const json* was = old_specs ? Field(*old_specs, type) : nullptr;
    if (now == nullptr || was == nullptr) continue;
    const json* n = Field(*now, "replicas");
    const json* w = Field(*was, "replicas");
    if (n == nullptr || w == nullptr) return false;  // no such field: an evaluation error
    if (*n != *w) return false;
  }
  return true;
}

}  // namespace

std::optional<bool> EvaluateKnownRule(std::string_view rule, const json& self, const json* old) {
  if (rule == kElasticBoundsRule) return ElasticBounds(self);
  if (rule == kFixedReplicasRule) return old == nullptr || FixedReplicas(self, *old);
  return std::nullopt;
}

}  // namespace lockstep::api
