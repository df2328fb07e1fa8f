#pragma once
// The three patch formats of the Kubernetes API, applied to JSON objects:
//  - JSON merge patch (RFC 7386, application/merge-patch+json);
//  - JSON patch (RFC 6902, application/json-patch+json), including `test`;
//  - strategic merge patch (application/strategic-merge-patch+json) as kubectl apply sends it
//    for built-in kinds: like a merge patch, except that lists of objects with a merge key
//    (containers, env, ports, volumes, ... by "name"; conditions by "type") are merged item
//    by item, `$patch: delete` removes an item, `$patch: replace` replaces a list or map, and
//    `$setElementOrder/<field>` and `$retainKeys` directives are honoured or dropped.
// Errors are kInvalidArgument (bad patch) or kFailedPrecondition (a failed `test`).
// Thread-safety: pure functions.

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace lockstep::local {

enum class PatchFormat { kMerge, kJson, kStrategicMerge };

// The patch format named by a Content-Type, or kUnsupported... as nullopt.
std::optional<PatchFormat> PatchFormatOf(std::string_view content_type);

absl::StatusOr<nlohmann::json> ApplyPatch(PatchFormat format, const nlohmann::json& original,
                                          const nlohmann::json& patch);

}  // namespace lockstep::local
