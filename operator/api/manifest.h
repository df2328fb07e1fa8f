#pragma once
// Reading manifests (and writing one as YAML): JSON text, and YAML (one or more `---` documents)
// converted to JSON the way kubectl reads it. Neither throws; malformed, truncated or too deeply
// nested input is an InvalidArgument status that says where the problem is. Thread-safety: pure
// functions.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace lockstep::api {

// Nesting deeper than this is refused before it can exhaust the stack of any recursive walk.
inline constexpr int kMaxNestingDepth = 256;

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text);

// Every non-empty document of a YAML stream (JSON is YAML too). Scalars resolve like kubectl:
// quoted -> string; null, ~ or empty -> null; true/false/yes/no/on/off -> bool; integers and
// floats -> numbers; anything else -> string.
absl::StatusOr<std::vector<nlohmann::json>> ParseYamlDocuments(std::string_view text);

// Reads a file and parses it with ParseYamlDocuments.
absl::StatusOr<std::vector<nlohmann::json>> ReadManifestFile(const std::string& path);

// One document as block YAML that ParseYamlDocuments reads back as `doc` (strings that would
// resolve to another type are quoted; keys sorted, as nlohmann::json keeps them).
std::string ToYaml(const nlohmann::json& doc);

}  // namespace lockstep::api
