#pragma once
// Structural OpenAPI v3 schemas, as apiextensions.k8s.io/v1 CustomResourceDefinitions use them:
// the checks a Kubernetes API server makes before it accepts a CRD's schema, and what it then
// does to every custom resource: apply defaults, prune unknown fields, validate.
// Used to test crds/ without a cluster, and by the local API server.
// Thread-safety: pure functions.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"

namespace lockstep::api {

// The problems that would make an API server reject `schema` (an openAPIV3Schema) or report it
// as NonStructuralSchema: a node without a type, properties beside additionalProperties,
// arrays without items, unknown keywords, type-bearing keywords inside allOf/anyOf/oneOf/not,
// enum values or defaults that do not fit their schema, defaults that would be pruned.
// Paths are relative to `path` ("spec.versions[0].schema.openAPIV3Schema").
FieldErrors CheckStructuralSchema(const nlohmann::json& schema, const FieldPath& path);

// Sets every missing (or null, unless nullable) property that has a default, then descends,
// so nested defaults apply inside defaulted objects too.
void ApplySchemaDefaults(const nlohmann::json& schema, nlohmann::json* value);

// Removes fields the schema does not specify (unless x-kubernetes-preserve-unknown-fields).
// At the root, apiVersion, kind and metadata are always kept. Returns the pruned paths.
std::vector<std::string> PruneUnknownFields(const nlohmann::json& schema, nlohmann::json* value,
                                            bool is_root = true);

// Checks `value` against `schema`: types, enums, bounds, lengths, patterns, required fields.
// `old`: the value at the same place in the object an update replaces (null on a create, or
// where it has none): transition rules (oldSelf) are checked against it.
FieldErrors ValidateAgainstSchema(const nlohmann::json& schema, const nlohmann::json& value,
                                  const FieldPath& path, const nlohmann::json* old = nullptr);

}  // namespace lockstep::api
